//go:build !linux

package netloop

import (
	"errors"
	"net"
	"time"
)

// Supported reports whether loops can run here (Linux: epoll).
const Supported = false

var errUnsupported = errors.New("netloop: event loops need Linux (epoll)")

// Events say what became of a socket.
type Events uint32

const (
	In    Events = 1
	Out   Events = 4
	Ended Events = 8
)

type Handler interface{ Ready(ev Events) }
type Flusher interface{ Flush() }
type Reg struct{}
type Loop struct{}

var (
	ErrClosed     = errors.New("netloop: loop closed")
	ErrWouldBlock = errors.New("netloop: would block")
)

func New() (*Loop, error)                          { return nil, errUnsupported }
func (l *Loop) Add(fd int, h Handler) (Reg, error) { return Reg{}, errUnsupported }
func (l *Loop) Del(reg Reg)                        {}
func (l *Loop) Post(fn func())                     {}
func (l *Loop) Schedule(f Flusher)                 {}
func (l *Loop) Close()                             {}
func (l *Loop) Now() time.Time                     { return time.Now() }
func (l *Loop) Wakeups() uint64                    { return 0 }
func Detach(nc net.Conn) (int, error)              { return -1, errUnsupported }
func DetachListener(ln net.Listener) (int, error)  { return -1, errUnsupported }
func Accept(lfd int) (int, string, string, error)  { return -1, "", "", errUnsupported }
func Close(fd int) error                           { return errUnsupported }
func Read(fd int, p []byte) (int, error)           { return 0, errUnsupported }
func Write(fd int, p []byte) (int, error)          { return 0, errUnsupported }
func WaitReadable(fd int, ms int) bool             { return false }
func LastDataAge(fd int) (time.Duration, bool)     { return 0, false }

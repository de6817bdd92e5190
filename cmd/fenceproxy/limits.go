package main

import (
	"flag"
	"fmt"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/protocol"
)

// limits are the client limits Redis also has, under Redis's names and with
// Redis's defaults and syntax, so a value copied from redis.conf works.
type limits struct {
	normalOutput    protocol.OutputLimit
	pubsubOutput    protocol.OutputLimit
	queryBufLimit   int64
	protoMaxBulkLen int64
	timeout         int // seconds; 0: never
}

// register adds the flags, with l's values (defaultConfig's) as defaults.
func (l *limits) register(fs *flag.FlagSet) {
	fs.Var(outputLimitFlag{l}, "client-output-buffer-limit", "`\"class hard soft seconds\"` for class normal or pubsub, as in redis.conf (repeatable, or ';'-separated): a client whose unwritten replies exceed hard, or exceed soft for seconds, is disconnected; 0 turns a limit off")
	fs.Var(memoryFlag{&l.queryBufLimit}, "client-query-buffer-limit", "`bytes` (units as in redis.conf: 1gb, 512mb) one request's arguments may take while read; a client over it is disconnected")
	fs.Var(memoryFlag{&l.protoMaxBulkLen}, "proto-max-bulk-len", "longest single request argument in `bytes` (units as in redis.conf); longer gets a protocol error")
	fs.IntVar(&l.timeout, "timeout", l.timeout, "close a client after this many `seconds` idle (0: never); blocked and subscribed clients are not idle")
}

func (l *limits) check() error {
	switch {
	case l.queryBufLimit < 1<<20 || l.protoMaxBulkLen < 1<<20:
		return fmt.Errorf("--client-query-buffer-limit and --proto-max-bulk-len must be at least 1mb (as in Redis)")
	case l.timeout < 0:
		return fmt.Errorf("--timeout must be 0 (never) or a number of seconds")
	}
	return nil
}

// apply sets the limits on srv.
func (l *limits) apply(srv *protocol.Server) {
	srv.NormalOutput, srv.PubSubOutput = l.normalOutput, l.pubsubOutput
	srv.Limits.MaxQueryBuf = l.queryBufLimit
	srv.Limits.MaxBulkLen = l.protoMaxBulkLen
	srv.IdleTimeout = time.Duration(l.timeout) * time.Second
}

type outputLimitFlag struct{ l *limits }

func (f outputLimitFlag) String() string {
	if f.l == nil {
		return ""
	}
	return "normal " + f.l.normalOutput.String() + " pubsub " + f.l.pubsubOutput.String()
}

func (f outputLimitFlag) Set(s string) error {
	return protocol.ParseOutputLimits(s, &f.l.normalOutput, &f.l.pubsubOutput)
}

type memoryFlag struct{ p *int64 }

func (f memoryFlag) String() string {
	if f.p == nil {
		return ""
	}
	return fmt.Sprint(*f.p)
}

func (f memoryFlag) Set(s string) error {
	n, err := protocol.ParseMemory(s)
	if err != nil {
		return err
	}
	*f.p = n
	return nil
}

// limitsInfo is the "# fenceproxy" INFO section's lines for the client
// limits, named as Redis's configuration names them.
func limitsInfo(srv *protocol.Server) string {
	return fmt.Sprintf("maxclients:%d\r\ntimeout:%d\r\nclient_output_buffer_limit:normal %s pubsub %s\r\n"+
		"client_query_buffer_limit:%d\r\nproto_max_bulk_len:%d\r\n",
		srv.MaxClients, int64(srv.IdleTimeout/time.Second), srv.NormalOutput, srv.PubSubOutput,
		srv.Limits.MaxQueryBuf, srv.Limits.MaxBulkLen)
}

package tier

import (
	"errors"

	"github.com/hashicorp/raft"
)

// ErrClosed: the node was closed.
var ErrClosed = errors.New("tier: node closed")

// UnavailableError refuses a token or a read on a node that is not the
// tier's ready leader (a follower, a candidate, a leader that has not yet
// committed its LeaderStart, or one that lost leadership). The command
// layer answers it -TRYAGAIN: nothing was granted, retry.
type UnavailableError struct {
	// LeaderAddr is the leader's client address, if one is known.
	LeaderAddr string
	// Lost: leadership was lost while the command was in flight.
	Lost bool
}

func (e *UnavailableError) Error() string {
	switch {
	case e.Lost:
		return "tier: leadership lost while the command was in flight"
	case e.LeaderAddr != "":
		return "tier: not the leader (the leader serves clients at " + e.LeaderAddr + ")"
	}
	return "tier: no leader is known (an election is under way)"
}

// RESPError is the client's reply: -TRYAGAIN, naming where the leader
// serves clients when it is known (a fenceproxy address the client may
// use, not a backend's).
func (e *UnavailableError) RESPError() (code, msg string) {
	switch {
	case e.Lost:
		return "TRYAGAIN", "fenceproxy: the tier's leader changed while the lock command was in flight; nothing was granted by this attempt, retry"
	case e.LeaderAddr != "":
		return "TRYAGAIN", "fenceproxy: this node is not the tier's leader; the leader serves clients at " + e.LeaderAddr + ", retry there or here"
	}
	return "TRYAGAIN", "fenceproxy: the tier is electing a leader; nothing was done, retry shortly"
}

// fromRaft turns a raft future's error into the error a caller gets:
// leadership lost or never held is an UnavailableError.
func (n *Node) fromRaft(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrAbortedByRestore),
		errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return &UnavailableError{Lost: true}
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrEnqueueTimeout):
		return n.notLeader()
	case errors.Is(err, raft.ErrRaftShutdown):
		return ErrClosed
	}
	return err
}

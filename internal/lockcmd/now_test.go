package lockcmd

import (
	"testing"

	"github.com/fenceproxy/fenceproxy/internal/locks"
	"github.com/fenceproxy/fenceproxy/internal/resp"
)

// busyWhenAnswered records whether the connection's request for resource
// was still running when its reply was completed.
type busyWhenAnswered struct {
	reqs     *locks.ConnRequests
	resource string
	busy     *bool
}

func (b busyWhenAnswered) Complete(*resp.Reply) { *b.busy = b.reqs.Busy(b.resource) }

// TestNowReplyEndsBeforeAnswering: a request run as callbacks ends before
// its reply is completed, so the client's next request for the resource,
// sent on reading it, starts as callbacks too rather than queueing behind
// a request already done. Mutation: p.Done before Finished (as until stop
// 34; CI's TestRecipesOnTheLoop caught it once) fails it.
func TestNowReplyEndsBeforeAnswering(t *testing.T) {
	var reqs locks.ConnRequests
	if !reqs.StartNow("x") {
		t.Fatal("StartNow on an idle connection")
	}
	busy := true
	r := &nowReply{p: resp.NewReplyTo(busyWhenAnswered{&reqs, "x", &busy}), reqs: &reqs, resource: "x"}
	r.done()
	if busy {
		t.Fatal("the reply was completed while its request still ran")
	}
}

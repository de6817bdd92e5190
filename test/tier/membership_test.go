package tier

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// TIER.ADD of an address where nothing listens is refused, and changes
// nothing: a voter that never answers would leave the tier one failure
// from stopping every grant (issue 22, item 7).
func TestTierAddOfAnUnreachableNodeRefused(t *testing.T) {
	tr := startTier(t)
	l := tr.Leader(t)
	nowhere := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	r := retry(t, tr.Nodes[l].Addr, "TIER.ADD", "n9", nowhere)
	if !bytes.HasPrefix(r, []byte("-ERR")) || !bytes.Contains(r, []byte("nothing answers at "+nowhere)) {
		t.Fatalf("TIER.ADD n9 %s (nothing listens there) = %s, want an error saying nothing answers there", nowhere, testenv.ShowReply(r))
	}
	if got := testenv.TierInfo(tr.Nodes[l].Addr)["tier_peers"]; got != "3" {
		t.Fatalf("after the refused TIER.ADD the tier has %s nodes, want 3", got)
	}
}

// TIER.REMOVE of an id the tier does not have is an error naming the ids
// it has (issue 22, item 7).
func TestTierRemoveOfAnUnknownIDRefused(t *testing.T) {
	tr := startTier(t)
	l := tr.Leader(t)
	r := retry(t, tr.Nodes[l].Addr, "TIER.REMOVE", "nosuch")
	if !bytes.HasPrefix(r, []byte("-ERR")) || !bytes.Contains(r, []byte(strings.Join(tr.IDs, ", "))) {
		t.Fatalf("TIER.REMOVE nosuch = %s, want an error naming the tier's nodes %v", testenv.ShowReply(r), tr.IDs)
	}
}

// A node removed by TIER.REMOVE says so, in its log and to lock
// commands, instead of "electing a leader" forever; the others go on
// granting (issue 22, item 7).
func TestRemovedNodeSaysSo(t *testing.T) {
	tr := startTier(t)
	l := tr.Leader(t)
	f := followers(tr, l)[0]
	if r := retry(t, tr.Nodes[l].Addr, "TIER.REMOVE", tr.IDs[f]); string(r) != "+OK\r\n" {
		t.Fatalf("TIER.REMOVE %s = %s", tr.IDs[f], testenv.ShowReply(r))
	}
	c := testenv.Dial(t, tr.Nodes[f].Addr)
	defer c.Close()
	var last []byte
	deadline := time.Now().Add(30 * time.Second)
	for {
		// Right after the removal the node may still relay to the leader
		// (a token) until it has the configuration without itself.
		last = c.Do("LOCK.ACQUIRE", "r", "o", "10000")
		if !bytes.HasPrefix(last, []byte("-TRYAGAIN")) && !bytes.HasPrefix(last, []byte(":")) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("LOCK.ACQUIRE on the removed node %s still %s after 30s", tr.IDs[f], testenv.ShowReply(last))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !bytes.HasPrefix(last, []byte("-ERR")) || !bytes.Contains(last, []byte("removed from the tier")) {
		t.Fatalf("LOCK.ACQUIRE on the removed node %s = %s, want an error saying it was removed", tr.IDs[f], testenv.ShowReply(last))
	}
	if !strings.Contains(tr.Nodes[f].Log(), "removed from the tier") {
		t.Fatalf("the removed node's log does not say it was removed:\n%s", tr.Nodes[f].Log())
	}
	if _, ok := testenv.ParseInt(retry(t, tr.Nodes[l].Addr, "LOCK.ACQUIRE", "r", "o", "10000")); !ok {
		t.Fatal("the leader does not grant after the removal")
	}
}

// A node added by TIER.ADD joins as a non-voter and is promoted to a
// voter once it has caught up.
func TestTierAddPromotesOnceCaughtUp(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	testenv.StartReplica(t, master)
	tr := testenv.StartTier(t, testenv.TierOptions{Backend: master.Addr, MinReplicas: 1})
	l := tr.Leader(t)
	for i := range 10 {
		retry(t, tr.Nodes[l].Addr, "LOCK.ACQUIRE", fmt.Sprintf("a%d", i), "o", "60000")
	}
	raft := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	var peers []string
	for i := range tr.Nodes {
		peers = append(peers, tr.IDs[i]+"="+tr.Raft[i])
	}
	peers = append(peers, "n4="+raft)
	n4 := testenv.StartProxy(t, testenv.ProxyOptions{Backend: master.Addr, MinReplicas: 1,
		Args: []string{"--node-id", "n4", "--raft-listen", raft, "--peers", strings.Join(peers, ",")}})
	if r := retry(t, tr.Nodes[l].Addr, "TIER.ADD", "n4", raft); string(r) != "+OK\r\n" {
		t.Fatalf("TIER.ADD n4 = %s", testenv.ShowReply(r))
	}
	// Promoted, and votes again: it learns the commit of its last entry
	// (the promotion itself) from the barrier the leader appends after it.
	waitFor(t, "n4 to be promoted to a voter, and to vote again", func() bool {
		f := testenv.TierInfo(tr.Nodes[l].Addr)
		return f["tier_voters"] == "4" && strings.Contains(f["tier_peer_n4"], "voter=1") &&
			testenv.TierInfo(n4.Addr)["tier_rejoining"] == "0"
	})
}

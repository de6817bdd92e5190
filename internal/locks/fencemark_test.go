package locks

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fenceproxy/fenceproxy/internal/keys"
	"github.com/fenceproxy/fenceproxy/internal/lockwriter"
	"github.com/fenceproxy/fenceproxy/internal/testenv"
)

// markOf reads a fence mark's value ("" if there is none).
func markOf(t *testing.T, c *testenv.Conn, key string) string {
	t.Helper()
	v, ok := testenv.ParseBulk(c.Do("GET", key))
	if !ok {
		return ""
	}
	return string(v)
}

// execRaw runs execScript on c as FencedExecAs sends it: the mark, then
// the command's keys; token, term, checked-at, the mark's life, then the
// command.
func execRaw(c *testenv.Conn, mark string, cmdKeys []string, token, term string, checkedAt, life int64, command ...string) string {
	args := []string{"EVAL", execScript, strconv.Itoa(1 + len(cmdKeys)), mark}
	args = append(args, cmdKeys...)
	args = append(args, token, term, strconv.FormatInt(checkedAt, 10), strconv.FormatInt(life, 10))
	return string(c.Do(append(args, command...)...))
}

// TestGrantsRaiseTheFenceMark: a new grant (acquire's fast path, its path
// after a lock-delay, a handoff) raises the resource's fence mark to its
// token and term, with the mark's life; a re-arm, a renewal and a release
// leave it; a grant never lowers it; what is there that is not a mark is
// written over.
func TestGrantsRaiseTheFenceMark(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	c := testenv.Dial(t, master.Addr)
	c.Do("SCRIPT", "LOAD", opsScript)
	const now, life = int64(1733300000000), int64(600000)
	acquire := func(r, owner string, cand uint64, delay int64, term uint64) lockwriter.ScriptCall {
		return opCall(opAcquire, r, owner, int64(10000), cand, "", false, delay, now,
			recordValue{token: cand, term: term, at: now, addr: "127.0.0.1:9", owner: owner}, term, life)
	}
	handoff := func(r, owner, head string, cand uint64) lockwriter.ScriptCall {
		return opCall(opHandoff, r, owner, int64(0), uint64(0), int64(20000), cand,
			recordValue{token: cand, at: now + 5, addr: "127.0.0.1:8", owner: head}, life)
	}
	mark := func(r string) string { return markOf(t, c, markKey("fenceproxy:lock:{"+r+"}")) }

	runOps(t, c, acquire("r", "a", 10, 0, 0))
	if got := mark("r"); got != "10 0" {
		t.Fatalf("the mark after a's grant of 10: %q, want \"10 0\"", got)
	}
	if pttl, _ := testenv.ParseInt(c.Do("PTTL", markKey("fenceproxy:lock:{r}"))); pttl <= 10000 || pttl > life {
		t.Errorf("the mark's PTTL %d, want the mark's life %d, not the lease's", pttl, life)
	}
	runOps(t, c,
		opCall(opAcquire, "r", "a", int64(10000), uint64(11), "10", false, int64(0), now,
			recordValue{token: 11, at: now, owner: "a"}, uint64(0), life), // a's re-arm of 10
		opCall(opRenew, "r", "a", int64(20000), "10", int64(0), now+1, uint64(0)),
	)
	if got := mark("r"); got != "10 0" {
		t.Errorf("the mark after a's re-arm and renewal: %q, want it unchanged", got)
	}
	runOps(t, c, handoff("r", "a", "b", 12))
	if got := mark("r"); got != "12 0" {
		t.Errorf("the mark after the handoff to b's 12: %q", got)
	}
	runOps(t, c, opCall(opRelease, "r", "b", int64(0), uint64(0)))
	if got := mark("r"); got != "12 0" {
		t.Errorf("the mark after b's release: %q, want it to outlive the record", got)
	}

	// A grant below the mark (a mark raised by a FENCE.EXEC of a token
	// this grant's store never issued) leaves it as it is.
	c.Do("SET", markKey("fenceproxy:lock:{low}"), "50 3", "PX", "60000")
	runOps(t, c, acquire("low", "a", 40, 0, 4))
	if got := mark("low"); got != "50 3" {
		t.Errorf("a grant of 40 under a mark of 50: mark %q, want it kept", got)
	}
	// The slow path (a lock-delay) raises it too, to the grant's term.
	runOps(t, c, acquire("slow", "a", 7, 1000, 2))
	if got := mark("slow"); got != "7 2" {
		t.Errorf("a grant with a lock-delay: mark %q, want \"7 2\"", got)
	}
	// Not a mark: written over by the next grant.
	c.Do("RPUSH", markKey("fenceproxy:lock:{junk}"), "x")
	if got := runOps(t, c, acquire("junk", "a", 8, 0, 0)); fmt.Sprint(got[0]) != "8" {
		t.Fatalf("a grant over a list at the mark's key: %v", got[0])
	}
	if got := mark("junk"); got != "8 0" {
		t.Errorf("the mark after a grant over a list: %q", got)
	}
}

// TestExecScriptChecksTheFenceMark: execScript runs its command only if
// its token is at or above the mark's and its term at or above the mark's,
// and only within half the mark's life of its check by Redis's clock; a
// write that runs raises the mark to its token and term.
func TestExecScriptChecksTheFenceMark(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	c := testenv.Dial(t, master.Addr)
	const life = int64(600000)
	const mk = "fenceproxy:lock:{r}:fence"
	now := time.Now().UnixMilli()

	// No mark yet (granted before the mark existed, or it expired): runs.
	if got := execRaw(c, mk, []string{"k"}, "5", "0", now, life, "SET", "k", "five"); got != "+OK\r\n" {
		t.Fatalf("token 5 with no mark: %q", got)
	}
	if got := markOf(t, c, mk); got != "5 0" {
		t.Errorf("the mark after 5 wrote: %q", got)
	}
	if pttl, _ := testenv.ParseInt(c.Do("PTTL", mk)); pttl <= 0 || pttl > life {
		t.Errorf("the mark's PTTL %d, want up to %d", pttl, life)
	}
	// A newer grant raised it: the older token is refused, and its
	// command does not run.
	c.Do("SET", mk, "12 0", "PX", "60000")
	if got := execRaw(c, mk, []string{"k"}, "5", "0", now, life, "SET", "k", "stale"); !strings.HasPrefix(got, "-FENCESTALE 12") {
		t.Errorf("token 5 under a mark of 12: %q, want -FENCESTALE 12", got)
	}
	// Tokens compare exactly, as strings, where doubles would not.
	c.Do("SET", mk, "9007199254740993 0", "PX", "60000")
	if got := execRaw(c, mk, []string{"k"}, "9007199254740992", "0", now, life, "SET", "k", "stale"); !strings.HasPrefix(got, "-FENCESTALE") {
		t.Errorf("token 2^53 under a mark of 2^53+1: %q, want -FENCESTALE", got)
	}
	// A newer term's mark: refused (a deposed leader's write).
	c.Do("SET", mk, "12 3", "PX", "60000")
	if got := execRaw(c, mk, []string{"k"}, "12", "2", now, life, "SET", "k", "deposed"); !strings.HasPrefix(got, "-NEWERTERM 3") {
		t.Errorf("term 2 under a mark of term 3: %q, want -NEWERTERM 3", got)
	}
	// Checked longer ago than half the mark's life: refused.
	if got := execRaw(c, mk, []string{"k"}, "12", "3", now-life/2-60000, life, "SET", "k", "late"); !strings.HasPrefix(got, "-FENCELATE") {
		t.Errorf("a write checked %d ms ago: %q, want -FENCELATE", life/2+60000, got)
	}
	if v, _ := testenv.ParseBulk(c.Do("GET", "k")); string(v) != "five" {
		t.Fatalf("k = %q after the refused writes, want five", v)
	}
	// The mark's own token and a newer one run; the newer raises it.
	if got := execRaw(c, mk, []string{"k"}, "12", "3", now, life, "INCR", "n"); got != ":1\r\n" {
		t.Errorf("the mark's own token 12: %q", got)
	}
	if got := execRaw(c, mk, []string{"k"}, "20", "4", now, life, "SET", "k", "twenty"); got != "+OK\r\n" {
		t.Errorf("token 20 of term 4: %q", got)
	}
	if got := markOf(t, c, mk); got != "20 4" {
		t.Errorf("the mark after 20 wrote in term 4: %q", got)
	}
	// The command's own error is its reply; the mark was raised all the
	// same (the token was current).
	if got := execRaw(c, mk, []string{"k"}, "21", "4", now, life, "INCR", "k"); !strings.HasPrefix(got, "-ERR value is not an integer") {
		t.Errorf("INCR of a string: %q", got)
	}
	// No command keys: the mark alone.
	if got := execRaw(c, mk, nil, "21", "4", now, life, "PING"); got != "+PONG\r\n" {
		t.Errorf("PING: %q", got)
	}
	// The proxy reads the refusals as its errors.
	for raw, want := range map[string]error{
		"-FENCESTALE 12\r\n":                     ErrStale,
		"-NEWERTERM 3\r\n":                       ErrDeposed,
		"-FENCELATE 300001\r\n":                  ErrExecLate,
		"-ERR value is not an integer\r\n":       nil,
		"-WRONGTYPE Operation against a key\r\n": nil,
		"+OK\r\n":                                nil,
		"-FENCESTALEX\r\n":                       nil,
	} {
		if got := execRefusal([]byte(raw)); got != want {
			t.Errorf("execRefusal(%q) = %v, want %v", raw, got, want)
		}
	}
}

// TestSlotMarks: each hash slot has a tag that hashes to it, and a
// FENCE.EXEC in front of a Redis Cluster checks the mark of the slot its
// command writes: the record's own when it is that slot (or has no key),
// else a key of that slot named for the resource. On a standalone master,
// always the record's.
func TestSlotMarks(t *testing.T) {
	tags := slotTags()
	for slot, tag := range tags {
		if tag == "" || len(tag) > 4 || keys.SlotOf([]byte(tag)) != slot {
			t.Fatalf("slot %d's tag %q hashes to %d", slot, tag, keys.SlotOf([]byte(tag)))
		}
	}
	for _, cl := range []bool{false, true} {
		m := New(Options{Scripts: &fakeScripts{cluster: cl}})
		record := m.recordKey("acct")
		for _, tc := range []struct {
			first string
			same  bool // the record's own mark
		}{
			{"", true},
			{"balance:{acct}", true},
			{"other", !cl},
			{"x{zz}", !cl},
		} {
			got := m.execMarkKey("acct", record, tc.first)
			if tc.same {
				if got != markKey(record) {
					t.Errorf("cluster %v, key %q: mark %q, want the record's", cl, tc.first, got)
				}
				continue
			}
			slot := keys.SlotOf([]byte(tc.first))
			if keys.SlotOf([]byte(got)) != slot || !strings.HasPrefix(got, "fenceproxy:lock:{") || !strings.HasSuffix(got, "}:fence:acct") {
				t.Errorf("cluster, key %q (slot %d): mark %q in slot %d", tc.first, slot, got, keys.SlotOf([]byte(got)))
			}
		}
	}
}

// TestUndoLowersTheFenceMark: an undone grant's token comes back out of
// the mark, to the newest token issued besides it, if nothing raised the
// mark since; with the newest unknown the mark stays (the safe side).
func TestUndoLowersTheFenceMark(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	c := testenv.Dial(t, master.Addr)
	c.Do("SCRIPT", "LOAD", opsScript)
	const now, life = int64(1733300000000), int64(600000)
	grant := func(r string, cand uint64) {
		runOps(t, c, opCall(opAcquire, r, "a", int64(10000), cand, "", false, int64(0), now,
			recordValue{token: cand, at: now, owner: "a"}, uint64(0), life))
	}
	undo := func(r, token string, newest any) any {
		return runOps(t, c, opCall(opUndo, r, "a", token, int64(0), uint64(0), "", newest, life))[0]
	}
	mark := func(r string) string { return markOf(t, c, markKey("fenceproxy:lock:{"+r+"}")) }

	grant("r", 30)
	if got := undo("r", "30", uint64(12)); fmt.Sprint(got) != "1" || mark("r") != "12 0" {
		t.Errorf("undo of 30 with 12 the newest: %v, mark %q; want 1 and \"12 0\"", got, mark("r"))
	}
	grant("first", 31)
	if undo("first", "31", uint64(0)); mark("first") != "" {
		t.Errorf("undo of a resource's first grant: mark %q, want none", mark("first"))
	}
	grant("unknown", 32)
	if undo("unknown", "32", ""); mark("unknown") != "32 0" {
		t.Errorf("undo with the newest unknown: mark %q, want it kept", mark("unknown"))
	}
	// Raised again since (a newer grant, another's record): kept.
	grant("newer", 33)
	c.Do("SET", markKey("fenceproxy:lock:{newer}"), "40 0", "PX", "60000")
	if got := undo("newer", "33", uint64(12)); mark("newer") != "40 0" {
		t.Errorf("undo of 33 under a mark of 40: %v, mark %q, want it kept", got, mark("newer"))
	}
	// The record ran out before the undo (a late grant): the mark comes
	// down all the same, since the token is cancelled.
	grant("expired", 34)
	c.Do("DEL", "fenceproxy:lock:{expired}")
	if got := undo("expired", "34", uint64(20)); fmt.Sprint(got) != "0" || mark("expired") != "20 0" {
		t.Errorf("undo of an expired grant: %v, mark %q; want 0 and \"20 0\"", got, mark("expired"))
	}
}

// TestFencedExecRefusedInRedis: the script's refusals reach the caller as
// the Manager's errors; a mark above every token this node knows as issued
// is not called stale (ErrMarkAhead, -TRYAGAIN).
func TestFencedExecRefusedInRedis(t *testing.T) {
	command := [][]byte{[]byte("SET"), []byte("k"), []byte("v")}
	for _, tc := range []struct {
		raw  string
		want error
	}{
		{"-FENCESTALE 5\r\n", ErrStale}, // cannot happen for the newest, 5, but is stale by what the node knows
		{"-FENCESTALE 9\r\n", ErrMarkAhead},
		{"-NEWERTERM 4\r\n", ErrDeposed},
		{"-FENCELATE 43200001\r\n", ErrExecLate},
		{"-ERR value is not an integer or out of range\r\n", nil},
	} {
		scripts := newFakeScripts(t, reply{raw: tc.raw})
		f := holding(t, scripts, nil)
		raw, err := f.m.FencedExec(context.Background(), "r", 5, command)
		if err != tc.want || (err == nil && string(raw) != tc.raw) {
			t.Errorf("script reply %q: FencedExec = %q, %v; want %v", tc.raw, raw, err, tc.want)
		}
	}
}

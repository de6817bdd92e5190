package resp

import (
	"reflect"
	"testing"
)

func TestParse(t *testing.T) {
	cases := []struct {
		raw  string
		want any
		err  error
	}{
		{":42\r\n", int64(42), nil},
		{"+OK\r\n", "OK", nil},
		{"$3\r\na\r\n\r\n", "a\r\n", nil},
		{"$-1\r\n", nil, nil},
		{"*-1\r\n", nil, nil},
		{"*2\r\n:2\r\n$7\r\n1048577\r\n", []any{int64(2), "1048577"}, nil},
		{"*2\r\n:0\r\n:-2\r\n", []any{int64(0), int64(-2)}, nil},
		{"*2\r\n-ERR inner\r\n:1\r\n", []any{Error{"ERR", "inner"}, int64(1)}, nil},
		{"-WRONGTYPE Operation against a key\r\n", nil, Error{"WRONGTYPE", "Operation against a key"}},
		// The proxy's own words in an error reply are Redis's error all
		// the same: nothing is recognised by its text. (backend.ParseValue
		// made this one backend.ErrUnavailable.)
		{"-TRYAGAIN fenceproxy: Redis is unreachable, retry shortly\r\n", nil, Error{"TRYAGAIN", "fenceproxy: Redis is unreachable, retry shortly"}},
		{"-NOSCRIPT\r\n", nil, Error{"NOSCRIPT", ""}},
	}
	for _, tc := range cases {
		got, err := Parse([]byte(tc.raw))
		if err != tc.err || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Parse(%q) = %#v, %v; want %#v, %v", tc.raw, got, err, tc.want, tc.err)
		}
	}
	for _, bad := range []string{"", ":x\r\n", ":01\r\n", "$5\r\nab\r\n", "$2\r\nabcd\r\n", "*2\r\n:1\r\n", "?\r\n", ":1\r\n:2\r\n", "+OK\n"} {
		if _, err := Parse([]byte(bad)); err != ErrBadReply {
			t.Errorf("Parse(%q): err %v, want ErrBadReply", bad, err)
		}
	}
}

// FuzzParse: Parse never panics nor allocates by a count it was sent
// rather than the bytes it has, and what it accepts Size frames whole.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"+OK\r\n", ":1\r\n", "$3\r\nabc\r\n", "*2\r\n:1\r\n$-1\r\n", "*1\r\n-ERR x\r\n", "*10000000000000\r\n", "$-1\r\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if _, err := Parse(raw); err == nil {
			if n, ok := Size(raw); !ok || n != len(raw) {
				t.Fatalf("Parse accepted %q, Size = %d, %v", raw, n, ok)
			}
		}
	})
}

func TestParseInt(t *testing.T) {
	for _, tc := range []struct {
		in string
		n  int64
		ok bool
	}{
		{"0", 0, true}, {"7", 7, true}, {"-1", -1, true}, {"1234567890", 1234567890, true},
		{"9223372036854775807", 1<<63 - 1, true}, {"-9223372036854775808", -1 << 63, true},
		{"", 0, false}, {"-", 0, false}, {"+1", 0, false}, {"01", 0, false}, {"-0", 0, false},
		{" 1", 0, false}, {"1 ", 0, false}, {"1x", 0, false}, {"9223372036854775808", 0, false},
		{"-9223372036854775809", 0, false}, {"99999999999999999999", 0, false}, {"123456789012345678901", 0, false},
	} {
		if n, ok := ParseInt([]byte(tc.in)); n != tc.n || ok != tc.ok {
			t.Errorf("ParseInt(%q) = %d, %v; want %d, %v", tc.in, n, ok, tc.n, tc.ok)
		}
	}
}

func TestError(t *testing.T) {
	for text, want := range map[string]Error{
		"WRONGTYPE Operation against a key": {"WRONGTYPE", "Operation against a key"},
		"ERR":                               {"ERR", ""},
		"MOVED 3999 127.0.0.1:6381":         {"MOVED", "3999 127.0.0.1:6381"},
	} {
		e := NewError(text)
		if e != want || e.Error() != text {
			t.Errorf("NewError(%q) = %#v (%q), want %#v", text, e, e.Error(), want)
		}
		if got := string(AppendError(nil, e.Code, e.Msg)); got != "-"+text+"\r\n" {
			t.Errorf("AppendError(%#v) = %q", e, got)
		}
		if r, ok := ErrorReply([]byte("-" + text + "\r\n")); !ok || r != want {
			t.Errorf("ErrorReply(-%s) = %#v, %v", text, r, ok)
		}
	}
	if _, ok := ErrorReply([]byte("+OK\r\n")); ok {
		t.Error("ErrorReply(+OK) ok")
	}
	// A message cannot end the reply early: CR and LF become spaces.
	if got := string(AppendError(nil, "ERR", "a\r\nb")); got != "-ERR a  b\r\n" {
		t.Errorf("AppendError with CRLF = %q", got)
	}
	var _ CodedError = Error{}
}

func TestAppendCommand(t *testing.T) {
	got := string(AppendCommand([]byte("x"), [][]byte{[]byte("SET"), []byte("k"), {}}))
	if want := "x*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n"; got != want {
		t.Errorf("AppendCommand = %q, want %q", got, want)
	}
}

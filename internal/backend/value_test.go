package backend

import (
	"reflect"
	"testing"
)

func TestParseValue(t *testing.T) {
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
		{"-WRONGTYPE Operation against a key\r\n", nil, RedisError("WRONGTYPE Operation against a key")},
		{replyLost, nil, ErrLost},
		{ReplyUnavailable, nil, ErrUnavailable},
	}
	for _, tc := range cases {
		got, err := ParseValue([]byte(tc.raw))
		if err != tc.err || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseValue(%q) = %#v, %v; want %#v, %v", tc.raw, got, err, tc.want, tc.err)
		}
	}
	for _, bad := range []string{"", ":x\r\n", "$5\r\nab\r\n", "*2\r\n:1\r\n", "?\r\n", ":1\r\n:2\r\n"} {
		if _, err := ParseValue([]byte(bad)); err == nil {
			t.Errorf("ParseValue(%q) accepted", bad)
		}
	}
}

// FuzzParseValue: ParseValue never panics nor allocates by a count it was
// sent rather than the bytes it has.
func FuzzParseValue(f *testing.F) {
	for _, s := range []string{"+OK\r\n", ":1\r\n", "$3\r\nabc\r\n", "*2\r\n:1\r\n$-1\r\n", "*1\r\n-ERR x\r\n", "*10000000000000\r\n", "$-1\r\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		ParseValue(raw)
	})
}

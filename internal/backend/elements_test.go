package backend

import (
	"bytes"
	"testing"
)

func TestElements(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want []string
		ok   bool
	}{
		{"*0\r\n", []string{}, true},
		{"*3\r\n$1\r\na\r\n$-1\r\n:5\r\n", []string{"$1\r\na\r\n", "$-1\r\n", ":5\r\n"}, true},
		{"*2\r\n*2\r\n$1\r\nx\r\n-ERR e\r\n_\r\n", []string{"*2\r\n$1\r\nx\r\n-ERR e\r\n", "_\r\n"}, true},
		{"*1\r\n%1\r\n+k\r\n+v\r\n", []string{"%1\r\n+k\r\n+v\r\n"}, true},
		{"*-1\r\n", nil, false},
		{"-ERR no\r\n", nil, false},
		{"*2\r\n$1\r\na\r\n", nil, false},  // short
		{"*1\r\n$5\r\nab\r\n", nil, false}, // bulk overruns
		{"*1\r\n:1\r\n:2\r\n", nil, false}, // trailing bytes
	} {
		got, ok := Elements([]byte(tc.raw))
		if ok != tc.ok || len(got) != len(tc.want) {
			t.Errorf("Elements(%q) = %q, %v; want %q, %v", tc.raw, got, ok, tc.want, tc.ok)
			continue
		}
		for i := range got {
			if !bytes.Equal(got[i], []byte(tc.want[i])) {
				t.Errorf("Elements(%q)[%d] = %q, want %q", tc.raw, i, got[i], tc.want[i])
			}
		}
	}
}

// FuzzElements: Elements never panics, and what it splits reassembles into
// the input behind the array's header.
func FuzzElements(f *testing.F) {
	for _, s := range []string{"*0\r\n", "*2\r\n$1\r\na\r\n:1\r\n", "*1\r\n*1\r\n%1\r\n+k\r\n_\r\n", ">3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$1\r\nm\r\n", "*1\r\n$-1\r\n", "*3\r\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		elems, ok := Elements(raw)
		if !ok {
			return
		}
		var body []byte
		for _, e := range elems {
			body = append(body, e...)
		}
		if !bytes.HasSuffix(raw, body) || bytes.IndexByte(raw[:len(raw)-len(body)], '\n') != len(raw)-len(body)-1 {
			t.Fatalf("Elements(%q) = %q: not the input after one header line", raw, elems)
		}
	})
}

package keys

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

// FuzzKeys runs Keys on arbitrary requests against the table of
// testdata/command-7.0.reply (no server needed) and checks invariants 1 and
// 2 of the package doc. The input is one request, arguments separated by
// spaces; an unknown command name is replaced by one of the table's, chosen
// by the input, so every command gets exercised.
func FuzzKeys(f *testing.F) {
	tab := fileTable(f)
	names := tab.Names()
	slices.Sort(names)
	for _, r := range corpus {
		f.Add([]byte(r.line))
	}
	f.Add([]byte("EVAL s 9223372036854775807 k"))
	f.Add([]byte("EVAL s 18446744073709551616 k"))
	f.Add([]byte("XREAD STREAMS"))
	f.Add([]byte("MIGRATE KEYS KEYS KEYS"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, line []byte) {
		args := bytes.Split(line, []byte(" "))
		cmd := tab.LookupBytes(args[0])
		if cmd == nil {
			var h uint32
			for _, c := range line {
				h = h*31 + uint32(c)
			}
			name := names[int(h%uint32(len(names)))]
			if container, sub, ok := strings.Cut(name, "|"); ok && len(args) > 1 {
				name = container // through Sub, with the subcommand in the input's case
				args[1] = bytes.ToUpper([]byte(sub))
			}
			cmd = tab.Lookup(name)
		}
		dst := cmd.Keys([]int{-1}, args)
		if dst[0] != -1 {
			t.Fatalf("%q: dst prefix overwritten: %v", args, dst)
		}
		for j, i := range dst[1:] {
			if i < 1 || i >= len(args) {
				t.Fatalf("%s %q: index %d out of [1, %d): %v", cmd.Name(), args, i, len(args), dst)
			}
			if j > 0 && i < dst[j] {
				t.Fatalf("%s %q: not ascending: %v", cmd.Name(), args, dst)
			}
		}
		if len(dst)-1 > len(args) {
			t.Fatalf("%s %q: %d keys from %d arguments", cmd.Name(), args, len(dst)-1, len(args))
		}
	})
}

// FuzzLoad checks that Load never panics on arbitrary input, seeded with the
// real reply, halves of it, and the rejected inputs.
func FuzzLoad(f *testing.F) {
	f.Add([]byte("*1\r\n*6\r\n$3\r\nget\r\n:2\r\n*0\r\n:1\r\n:1\r\n:1\r\n"))
	f.Add([]byte("*1\r\n*10\r\n$4\r\neval\r\n:-3\r\n*0\r\n:0\r\n:0\r\n:0\r\n*0\r\n*0\r\n*1\r\n*4\r\n$12\r\nbegin_search\r\n*4\r\n$4\r\ntype\r\n$5\r\nindex\r\n$4\r\nspec\r\n*2\r\n$5\r\nindex\r\n:2\r\n$9\r\nfind_keys\r\n*4\r\n$4\r\ntype\r\n$6\r\nkeynum\r\n$4\r\nspec\r\n*6\r\n$9\r\nkeynumidx\r\n:0\r\n$8\r\nfirstkey\r\n:1\r\n$7\r\nkeystep\r\n:0\r\n*0\r\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		tab, err := Load(in)
		if err != nil {
			return
		}
		for _, n := range tab.Names() {
			args := [][]byte{[]byte(n), []byte("1"), []byte("2"), []byte("STREAMS"), []byte("3")}
			for _, i := range tab.Lookup(n).Keys(nil, args) {
				if i < 1 || i >= len(args) {
					t.Fatalf("%s: index %d out of range", n, i)
				}
			}
		}
	})
}

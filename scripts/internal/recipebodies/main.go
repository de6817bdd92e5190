// Command recipebodies extracts lock-script bodies from the packages the
// client libraries ship, for scripts/recipe-bodies.sh. The bodies are
// third-party code and never enter this repository: the tests fetch them
// at test time (RECIPES_BODIES) to prove that fenceproxy's twin scripts
// have exactly the effect of the clients' own.
//
//	recipebodies go-string FILE.go NAME
//	    prints the first string literal in the declaration of NAME (a
//	    package-level var or const) exactly as the compiler sees it
//	    (redsync's `var deleteScript = redis.NewScript(1, `...`)`).
//	recipebodies class-strings JAR SHA1=OUT...
//	    reads the constant pool of every class in JAR and writes each
//	    CONSTANT_Utf8 whose SHA-1 is a wanted one to its OUT file. Redisson
//	    builds each body from Java string literals joined with +, which
//	    javac folds into one constant; the body is that constant's text.
//	    Fails naming each SHA-1 it did not find.
package main

import (
	"archive/zip"
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"strconv"
	"strings"
	"unicode/utf16"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "go-string":
		if len(os.Args) != 4 {
			usage()
		}
		var s string
		if s, err = goString(os.Args[2], os.Args[3]); err == nil {
			_, err = io.WriteString(os.Stdout, s)
		}
	case "class-strings":
		if len(os.Args) < 4 {
			usage()
		}
		err = classStrings(os.Args[2], os.Args[3:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "recipebodies:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: recipebodies go-string FILE.go NAME | class-strings JAR SHA1=OUT...")
	os.Exit(2)
}

// goString returns the first string literal of NAME's declaration in file.
// strconv.Unquote drops carriage returns from raw literals as the Go spec
// does, so the result is the string the library sends.
func goString(file, name string) (string, error) {
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		return "", err
	}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok {
			continue
		}
		for _, spec := range g.Specs {
			v, ok := spec.(*ast.ValueSpec)
			if !ok {
				continue
			}
			for i, id := range v.Names {
				if id.Name != name || i >= len(v.Values) {
					continue
				}
				if lit := firstString(v.Values[i]); lit != nil {
					return strconv.Unquote(lit.Value)
				}
				return "", fmt.Errorf("%s: %s has no string literal", file, name)
			}
		}
	}
	return "", fmt.Errorf("%s: no package-level %s", file, name)
}

func firstString(e ast.Expr) *ast.BasicLit {
	var found *ast.BasicLit
	ast.Inspect(e, func(n ast.Node) bool {
		if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING && found == nil {
			found = lit
		}
		return found == nil
	})
	return found
}

// classStrings writes the wanted constants (SHA1=OUT pairs) found in jar.
func classStrings(jar string, pairs []string) error {
	want := map[string]string{}
	for _, p := range pairs {
		sha, out, ok := strings.Cut(p, "=")
		if !ok || len(sha) != 40 {
			return fmt.Errorf("%q is not SHA1=OUT", p)
		}
		want[strings.ToLower(sha)] = out
	}
	z, err := zip.OpenReader(jar)
	if err != nil {
		return err
	}
	defer z.Close()
	found := map[string]bool{}
	for _, f := range z.File {
		if !strings.HasSuffix(f.Name, ".class") {
			continue
		}
		strs, err := readClassStrings(f)
		if err != nil {
			return fmt.Errorf("%s: %s: %w", jar, f.Name, err)
		}
		for _, s := range strs {
			sum := sha1.Sum([]byte(s))
			sha := hex.EncodeToString(sum[:])
			if out, ok := want[sha]; ok && !found[sha] {
				if err := os.WriteFile(out, []byte(s), 0o644); err != nil {
					return err
				}
				found[sha] = true
			}
		}
	}
	var missing []string
	for sha, out := range want {
		if !found[sha] {
			missing = append(missing, sha+" ("+out+")")
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s: no string constant with SHA-1 %s", jar, strings.Join(missing, ", "))
	}
	return nil
}

func readClassStrings(f *zip.File) ([]string, error) {
	r, err := f.Open()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	return constantPoolStrings(b)
}

var errTruncated = errors.New("class file truncated")

// constantPoolStrings returns the text of every CONSTANT_Utf8 entry of a
// class file (JVM spec 4.4). Only the pool is read; it comes right after
// the magic number and the version.
func constantPoolStrings(b []byte) ([]string, error) {
	if len(b) < 10 || binary.BigEndian.Uint32(b) != 0xCAFEBABE {
		return nil, errors.New("not a class file")
	}
	count := int(binary.BigEndian.Uint16(b[8:]))
	p := 10
	var out []string
	for i := 1; i < count; i++ {
		if p >= len(b) {
			return nil, errTruncated
		}
		tag := b[p]
		p++
		var size int
		switch tag {
		case 1: // Utf8: u2 length, then the bytes
			if p+2 > len(b) {
				return nil, errTruncated
			}
			n := int(binary.BigEndian.Uint16(b[p:]))
			p += 2
			if p+n > len(b) {
				return nil, errTruncated
			}
			s, err := modifiedUTF8(b[p : p+n])
			if err != nil {
				return nil, fmt.Errorf("constant %d: %w", i, err)
			}
			out = append(out, s)
			size = n
		case 3, 4: // Integer, Float
			size = 4
		case 5, 6: // Long, Double take two entries
			size = 8
			i++
		case 7, 8, 16, 19, 20: // Class, String, MethodType, Module, Package
			size = 2
		case 9, 10, 11, 12, 17, 18: // refs, NameAndType, Dynamic, InvokeDynamic
			size = 4
		case 15: // MethodHandle
			size = 3
		default:
			return nil, fmt.Errorf("constant %d: unknown tag %d", i, tag)
		}
		p += size
	}
	return out, nil
}

// modifiedUTF8 decodes the JVM's modified UTF-8 (NUL as C0 80,
// supplementary characters as two encoded surrogates) to a Go string.
func modifiedUTF8(b []byte) (string, error) {
	units := make([]uint16, 0, len(b))
	for i := 0; i < len(b); {
		c := b[i]
		switch {
		case c < 0x80:
			units = append(units, uint16(c))
			i++
		case c&0xE0 == 0xC0 && i+1 < len(b):
			units = append(units, uint16(c&0x1F)<<6|uint16(b[i+1]&0x3F))
			i += 2
		case c&0xF0 == 0xE0 && i+2 < len(b):
			units = append(units, uint16(c&0x0F)<<12|uint16(b[i+1]&0x3F)<<6|uint16(b[i+2]&0x3F))
			i += 3
		default:
			return "", fmt.Errorf("bad modified UTF-8 byte %#x at %d", c, i)
		}
	}
	return string(utf16.Decode(units)), nil
}

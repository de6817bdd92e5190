package persist_test

import (
	"fmt"
	"os"

	"github.com/fenceproxy/fenceproxy/internal/persist"
)

// A lock grant: take a token, make it durable, then reply with it.
func Example() {
	dir, _ := os.MkdirTemp("", "fence")
	defer os.RemoveAll(dir)

	s, err := persist.Open(dir, persist.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()

	tok, _ := s.NextToken()
	// Durable before the grant is known to stand (Redis's replicas answer
	// meanwhile); the newest only once it does.
	if err := s.Reserve([]byte("orders"), tok); err != nil {
		fmt.Println("no reply: outcome unknown:", err)
		return
	}
	if err := s.Confirm(persist.Grant{Resource: []byte("orders"), Token: tok}); err != nil {
		fmt.Println("no reply:", err)
		return
	}
	newest, _ := s.Newest([]byte("orders"))
	fmt.Println("granted", tok, "newest", newest)
	// Output: granted 1 newest 1
}

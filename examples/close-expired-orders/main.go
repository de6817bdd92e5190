// Command close-expired-orders is the classic case for a fenced lock: a
// scheduled job that closes orders whose payment window has passed, run on
// several machines at once for availability, where exactly one run may act
// at a time and a run that stalled past its lease must not act at all.
//
// Each run takes the lock "orders:close-expired", then closes orders with
// FENCE.EXEC, so a close written with an old token is refused by fenceproxy
// even if this process was paused (GC, swap, a stopped VM) after checking.
//
//	go run ./examples/close-expired-orders -addr 127.0.0.1:7379
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceproxy/fenceproxy/pkg/fencelock"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:7379", "fenceproxy address")
	orders := flag.Int("orders", 5, "demo orders to create, all already expired")
	flag.Parse()

	rdb := redis.NewClient(&redis.Options{Addr: *addr})
	err := closeExpired(context.Background(), rdb, *orders)
	rdb.Close()
	if err != nil {
		log.Fatal(err) // after closeExpired returned: its deferred Unlock has run
	}
}

// closeExpired creates the demo orders, takes the lock and closes the
// expired ones. It returns its errors rather than exiting: log.Fatal (an
// os.Exit) runs no deferred call, so the lock would be left held until its
// lease ran out and the next run would find it taken.
func closeExpired(ctx context.Context, rdb *redis.Client, orders int) error {
	// Demo data: order IDs in a sorted set by payment deadline.
	now := time.Now()
	for i := 1; i <= orders; i++ {
		id := "order:" + strconv.Itoa(i)
		rdb.HSet(ctx, id, "state", "awaiting-payment")
		rdb.ZAdd(ctx, "orders:deadline", redis.Z{Score: float64(now.Add(-time.Minute).Unix()), Member: id})
	}

	lock, err := fencelock.New(rdb).Lock(ctx, "orders:close-expired", 10*time.Second, 5*time.Second)
	if errors.Is(err, fencelock.ErrNotAcquired) {
		log.Print("another run holds the lock; nothing to do")
		return nil
	}
	if err != nil {
		return err
	}
	defer lock.Unlock(context.Background())
	log.Printf("holding the lock with token %d", lock.Token)

	expired, err := rdb.ZRangeArgs(ctx, redis.ZRangeArgs{
		Key: "orders:deadline", ByScore: true,
		Start: "-inf", Stop: strconv.FormatInt(time.Now().Unix(), 10),
	}).Result()
	if err != nil {
		return err
	}
	for _, id := range expired {
		// Stop as soon as the lease is lost: another run may be closing now.
		if err := lock.Context().Err(); err != nil {
			return fmt.Errorf("lease lost after closing some orders: %w", context.Cause(lock.Context()))
		}
		// The write itself carries the token: refused if it is stale.
		if err := lock.FencedExec(ctx, "HSET", id, "state", "closed", "closed-by-token", lock.Token).Err(); err != nil {
			return fmt.Errorf("closing %s: %w", id, err)
		}
		rdb.ZRem(ctx, "orders:deadline", id)
		fmt.Printf("closed %s\n", id)
	}
	return nil
}

package protocol

import "errors"

// Writing a batch held over a partial request.
//
// serve goes on reading while its buffer holds bytes after a request, so
// that a pipeline's requests, which arrive together, are answered with one
// write. But what is left may be only part of a request: the start of the
// next one (PING\r\nPI), a multibulk header without its arguments, a big
// argument still on its way, or no request at all (an empty line, which is
// skipped). Reading on would then wait for the client with the replies of
// the complete requests held, for as long as the client takes to send the
// rest, where Redis answers each complete request at once. So before the
// Reader reads the client while a batch is held, the batch is ended:
//
//   - First the read is tried without blocking. It gets the rest of a
//     pipeline that is already there, and costs no more than the read it
//     replaces, so pipelines are batched as before.
//   - When no byte is waiting, the batch is written (or left to its last
//     reply, as serve leaves one: later.go), and only then does the read
//     block. A blocked request (BLPOP, LOCK.ACQUIRE ... WAIT) is awaited
//     while watching the client, as writeBatch does.
//
// Reads without blocking stop after maxHeldInput bytes, so a client
// streaming one huge request right behind complete ones gets their replies
// without waiting for the whole of it. Over TLS (and where raw socket reads
// are not supported) a read cannot be tried without blocking (a record may
// be half there), so a held batch is written before the first read.
//
// This runs inside the Reader, in the middle of a request: nothing here
// may read through the Reader (the watch reads into the Reader's own
// buffer instead), and what arrives is handed back to it.

// maxHeldInput is how many bytes are read without blocking while a batch is
// held over a partial request, after which the batch is written anyway.
const maxHeldInput = 1 << 20

// errHeldWrite ends the read of a connection whose held batch could not be
// written: serve then returns, as after any failed write.
var errHeldWrite = errors.New("protocol: writing a held batch failed")

// endHeldBatch ends the batch held while the Reader reads into b (see
// above) and returns what it read from the client meanwhile, which the read
// returns instead of reading.
func (c *Conn) endHeldBatch(b []byte) (int, error) {
	if c.rawConn != nil && c.heldInput < maxHeldInput {
		if n := c.readNow(b); n > 0 {
			c.heldInput += n
			return n, nil
		}
	}
	n := 0
	if c.mayBlock {
		c.mayBlock = false
		if c.idleArmed { // armed by an earlier read of this request
			c.disarmIdle()
		}
		// A failed read is not kept: the blocking read after the write
		// fails the same way, or finds the end of the stream.
		c.awaitWatchingClient(func() error {
			var err error
			n, err = c.nc.Read(b)
			if n > 0 {
				return nil
			}
			return err
		})
	} else if c.writeLater() {
		return 0, nil
	}
	if err := c.writeBatch(); err != nil {
		return 0, errHeldWrite
	}
	return n, nil
}

//go:build unix

package persist

import (
	"strconv"
	"syscall"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// dirIdentity is the directory's inode number, "" if the file system does
// not say (an in-memory one). A copy of the directory (cp, rsync, a
// restored backup) has another; a move within a file system and a
// re-attached volume keep it.
func dirIdentity(fs vfs.FS, dir string) string {
	fi, err := fs.Stat(dir)
	if err != nil {
		return ""
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return ""
	}
	return strconv.FormatUint(uint64(st.Ino), 10)
}

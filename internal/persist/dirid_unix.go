//go:build unix

package persist

import (
	"fmt"
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

// dirOwner names the owner and mode of dir (or of its nearest existing
// parent, when dir is not there yet), "" if the file system does not say.
func dirOwner(fs vfs.FS, dir string) string {
	at := ""
	for {
		fi, err := fs.Stat(dir)
		if err == nil {
			st, ok := fi.Sys().(*syscall.Stat_t)
			if !ok {
				return ""
			}
			return fmt.Sprintf("%sowned by uid %d, mode %#o", at, st.Uid, fi.Mode().Perm())
		}
		parent := fs.PathDir(dir)
		if parent == dir {
			return ""
		}
		dir, at = parent, "its parent "+parent+" "
	}
}

package image

import (
	"os"
	"path/filepath"
	"strconv"

	"github.com/airlock-sandbox/airlock/internal/statedir"
)

// DirEnv names the variable that overrides DefaultDir.
const DirEnv = "AIRLOCK_IMAGES"

// DefaultDir is where the airlock command keeps its image store: $AIRLOCK_IMAGES,
// else /var/lib/airlock/images for root (a place every sandbox uid may
// traverse) and the user cache directory's airlock/images for others;
// without one that can be made (a home that does not exist),
// airlock-images-UID in the temporary directory, a name of
// the user's own (a store must be its user's, so a shared name would
// shut out every user but the first).
func DefaultDir() string { return defaultDir(os.Geteuid()) }

func defaultDir(uid int) string {
	if d := os.Getenv(DirEnv); d != "" {
		return d
	}
	if uid == 0 {
		return "/var/lib/airlock/images"
	}
	base, err := os.UserCacheDir()
	if dir := filepath.Join(base, "airlock", "images"); err == nil && statedir.Makeable(dir) {
		return dir
	}
	return filepath.Join(os.TempDir(), "airlock-images-"+strconv.Itoa(uid))
}

package image

import (
	"os"
	"path/filepath"
)

// DirEnv names the variable that overrides DefaultDir.
const DirEnv = "AIRLOCK_IMAGES"

// DefaultDir is where the airlock command keeps its image store: $AIRLOCK_IMAGES,
// else /var/lib/airlock/images for root (a place every sandbox uid may
// traverse) and the user cache directory's airlock/images for others.
func DefaultDir() string {
	if d := os.Getenv(DirEnv); d != "" {
		return d
	}
	if os.Geteuid() == 0 {
		return "/var/lib/airlock/images"
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "airlock-images")
	}
	return filepath.Join(base, "airlock", "images")
}

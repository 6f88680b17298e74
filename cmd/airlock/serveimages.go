//go:build !lean

package main

import (
	"cmp"
	"errors"
	"io/fs"
	"os"
	"slices"

	"github.com/airlock-sandbox/airlock/image"
	"github.com/airlock-sandbox/airlock/server"
)

// serverImages opens the image store of a server's configuration, with its
// rules: the host view and tagged references only where it allows them.
// dir and auth, when set (--images, --registry-auth), override the
// configuration's directory and credentials file.
func serverImages(is *server.ImageSettings, dir, auth string) (*image.Store, error) {
	var s server.ImageSettings
	if is != nil {
		s = *is
	}
	return image.Open(cmp.Or(dir, s.Dir, image.DefaultDir()), image.Options{
		AllowHost: s.AllowHost,
		AllowTags: s.AllowTags,
		Default:   s.Default,
		MaxBytes:  s.MaxMB << 20,
		AuthFile:  cmp.Or(auth, s.AuthFile),
	})
}

// localImages are the image settings of a server only its own user talks
// to (`airlock mcp` without a configuration): the CLI's default, the host
// view until the catalogue's python is built. The host view is offered
// only while it is that default: the model names a tool call's image, not
// the operator, and once python is built it may not switch to the host's
// own /usr (with --config, allow_host decides).
func localImages(dir string) *server.ImageSettings {
	dir = cmp.Or(dir, image.DefaultDir())
	s := &server.ImageSettings{Dir: dir, AllowHost: true, Default: image.Host}
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return s
	}
	st, err := image.Open(dir, image.Options{})
	if err != nil {
		return s
	}
	if infos, err := st.List(); err == nil {
		for _, in := range infos {
			if slices.Contains(in.Names, image.DefaultName) {
				s.Default, s.AllowHost = image.DefaultName, false
			}
		}
	}
	return s
}

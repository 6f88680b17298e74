//go:build !linux

package image

import (
	"context"
	"errors"
)

// Store is the image store; it unpacks with Linux-only calls, and Open
// refuses elsewhere.
type Store struct{}

var errUnsupported = errors.New("the image store needs Linux")

// Open refuses: the store needs Linux.
func Open(dir string, opts Options) (*Store, error) { return nil, errUnsupported }

func (s *Store) Acquire(ctx context.Context, ref string) (*Image, func(), error) {
	return nil, nil, &Error{Ref: ref, Err: errUnsupported}
}

func (s *Store) Check(ref string) error { return &Error{Ref: ref, Err: errUnsupported} }

func (s *Store) Current(ref string) (string, error) { return "", &Error{Ref: ref, Err: errUnsupported} }

func (s *Store) Derive(ctx context.Context, img *Image, kind string, build func(string) error) (string, error) {
	return "", &Error{Ref: img.Ref, Err: errUnsupported}
}

func (s *Store) Import(ctx context.Context, name, src string) (string, error) {
	return "", &Error{Ref: name, Err: errUnsupported}
}

func (s *Store) Pull(ctx context.Context, ref string) (string, error) {
	return "", &Error{Ref: ref, Err: errUnsupported}
}

func (s *Store) Remove(ctx context.Context, nameOrDigest string) error {
	return &Error{Ref: nameOrDigest, Err: errUnsupported}
}

func (s *Store) List() ([]Info, error) { return nil, errUnsupported }

func (s *Store) Dir() string { return "" }

func (s *Store) AuthFile() string { return "" }

func (s *Store) Default() string { return DefaultName }

func (s *Store) AllowsHost() bool { return false }

package microvm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"time"
)

// The Firecracker backend starts `firecracker --api-sock S --id NAME` and
// configures the machine over its REST API on that Unix socket: boot
// source (the same vmlinux and initramfs), machine config (vCPUs,
// memory), a vsock device, then InstanceStart. Firecracker has no
// virtio-console, so the agent reaches the host over vsock: a guest
// connection to CID 2 port fcCtlPort arrives on the host Unix socket
// "<uds_path>_<port>", which is the tier's control listener. The wire
// protocol on it is the same as with QEMU. Firecracker has no network
// device unless one is configured, and none is. It is used only where a
// firecracker binary and /dev/kvm are present, for cold starts and pools
// (snapshots are QEMU's).

const (
	fcGuestCID = 3
	fcCtlPort  = 1024
)

// fcRequest is one call to Firecracker's API.
type fcRequest struct {
	Method, Path string
	Body         any
}

type fcBootSource struct {
	KernelImagePath string `json:"kernel_image_path"`
	InitrdPath      string `json:"initrd_path,omitempty"`
	BootArgs        string `json:"boot_args"`
}

type fcMachineConfig struct {
	VCPUCount  int   `json:"vcpu_count"`
	MemSizeMiB int64 `json:"mem_size_mib"`
	SMT        bool  `json:"smt"`
}

type fcVsock struct {
	GuestCID int    `json:"guest_cid"`
	UDSPath  string `json:"uds_path"`
}

type fcDrive struct {
	DriveID      string `json:"drive_id"`
	PathOnHost   string `json:"path_on_host"`
	IsRootDevice bool   `json:"is_root_device"`
	IsReadOnly   bool   `json:"is_read_only"`
}

type fcAction struct {
	ActionType string `json:"action_type"`
}

// fcBootArgs is the guest kernel command line under Firecracker.
const fcBootArgs = "console=ttyS0 reboot=k panic=-1 pci=off quiet loglevel=1 cryptomgr.notests rdinit=/init " +
	"airlock.modules=virtio,virtio_ring,virtio_mmio,vsock,vmw_vsock_virtio_transport_common,vmw_vsock_virtio_transport"

// fcRequests is the one place a VM's shape becomes Firecracker API calls.
// An image's disk is the VM's one drive, read-only (the agent mounts it;
// it is not the kernel's root device).
func fcRequests(kernel, initrd, vsockPath string, s vmSpec) []fcRequest {
	args := fcBootArgs
	var drive []fcRequest
	if s.img != nil {
		args += "," + imageModules + " airlock.root=" + imageDevice
		drive = []fcRequest{{"PUT", "/drives/root", fcDrive{DriveID: "root", PathOnHost: s.img.disk, IsReadOnly: true}}}
	}
	reqs := []fcRequest{
		{"PUT", "/boot-source", fcBootSource{KernelImagePath: kernel, InitrdPath: initrd, BootArgs: args}},
		{"PUT", "/machine-config", fcMachineConfig{VCPUCount: s.vcpus, MemSizeMiB: s.memMB}},
		{"PUT", "/vsock", fcVsock{GuestCID: fcGuestCID, UDSPath: vsockPath}},
	}
	reqs = append(reqs, drive...)
	return append(reqs, fcRequest{"PUT", "/actions", fcAction{ActionType: "InstanceStart"}})
}

// fcClient talks HTTP to the API socket.
func fcClient(sock string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
		DisableKeepAlives: true,
	}}
}

// fcApply sends the requests in order, waiting (until ctx ends) for the
// API socket to accept connections first. Firecracker answers 204 on
// success and a JSON {"fault_message": ...} otherwise.
func fcApply(ctx context.Context, sock string, reqs []fcRequest, done <-chan struct{}) error {
	c := fcClient(sock)
	defer c.CloseIdleConnections()
	for i, r := range reqs {
		body, err := json.Marshal(r.Body)
		if err != nil {
			return err
		}
		for attempt := 0; ; attempt++ {
			req, err := http.NewRequestWithContext(ctx, r.Method, "http://localhost"+r.Path, bytes.NewReader(body))
			if err != nil {
				return err
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json")
			resp, err := c.Do(req)
			if err != nil {
				// Only the first call waits for the socket to appear.
				if i > 0 || ctx.Err() != nil {
					return fmt.Errorf("firecracker %s %s: %w", r.Method, r.Path, err)
				}
				select {
				case <-done:
					return fmt.Errorf("firecracker exited before its API came up")
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(5 * time.Millisecond):
				}
				continue
			}
			msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode/100 != 2 {
				var fault struct {
					Message string `json:"fault_message"`
				}
				_ = json.Unmarshal(msg, &fault)
				if fault.Message == "" {
					fault.Message = string(msg)
				}
				return fmt.Errorf("firecracker %s %s: %s: %s", r.Method, r.Path, resp.Status, fault.Message)
			}
			break
		}
	}
	return nil
}

func (t *Tier) firecrackerProcess(id, dir string, s vmSpec) vmmProcess {
	api := filepath.Join(dir, "api.sock")
	vsock := filepath.Join(dir, "v.sock")
	return vmmProcess{
		prog: t.fc,
		args: []string{"--api-sock", api, "--id", vmNamePrefix + id},
		ctl:  fmt.Sprintf("%s_%d", vsock, fcCtlPort),
		configure: func(ctx context.Context, v *vm) error {
			ctx, cancel := context.WithTimeout(ctx, t.cfg.bootTimeout)
			defer cancel()
			return fcApply(ctx, api, fcRequests(t.assets.kernel, t.assets.initrd, vsock, s), v.done)
		},
	}
}

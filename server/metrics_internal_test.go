package server

import (
	"context"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock"
)

// imagePooler is a tier's pool with two images' pools.
type imagePooler struct{}

func (imagePooler) PoolStats() airlock.PoolStats {
	return airlock.PoolStats{Size: 3, Ready: 2, Hits: 5, Misses: 1, Images: map[string]airlock.PoolStats{
		"sha256:aa": {Size: 1, Ready: 1, Hits: 4, Names: []string{"python", "py"}},
		"sha256:bb": {Size: 2, Ready: 1, Hits: 1, Misses: 1},
	}}
}
func (imagePooler) WaitWarm(context.Context) error { return nil }

// TestMetricsPoolImages exports each image's pool with an image label, in
// families apart from the tier's totals, and the names configuring it.
func TestMetricsPoolImages(t *testing.T) {
	var m metrics
	var b strings.Builder
	m.write(&b, map[string]airlock.Pooler{"gvisor": imagePooler{}})
	for _, want := range []string{
		`airlock_pool_size{tier="gvisor"} 2`,
		`airlock_pool_claims_total{tier="gvisor",result="hit"} 5`,
		`airlock_pool_image_size{tier="gvisor",image="sha256:aa"} 1`,
		`airlock_pool_image_capacity{tier="gvisor",image="sha256:bb"} 2`,
		`airlock_pool_image_claims_total{tier="gvisor",image="sha256:aa",result="hit"} 4`,
		`airlock_pool_image_claims_total{tier="gvisor",image="sha256:bb",result="miss"} 1`,
		"# TYPE airlock_pool_image_claims_total counter",
		`airlock_pool_image_name{tier="gvisor",image="sha256:aa",name="python"} 1`,
		`airlock_pool_image_name{tier="gvisor",image="sha256:aa",name="py"} 1`,
	} {
		if !strings.Contains(b.String(), want+"\n") {
			t.Errorf("metrics lack %q:\n%s", want, b.String())
		}
	}
}

// TestImagePoolsConfig: tier_settings.image_pools decodes per tier and
// image, and a bad tier, image or size is refused in one line naming it.
func TestImagePoolsConfig(t *testing.T) {
	base := "tenants: [{name: a, key_sha256: " + HashKey("k") + "}]\n"
	c, err := ParseConfig([]byte(base + "tier_settings:\n  gvisor_pool: 1\n  image_pools: {gvisor: {python: 2, node: 1}, process: {node: 3}, microvm: {node: 1}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p := c.TierSettings.ImagePools["gvisor"]; len(p) != 2 || p["python"] != 2 || p["node"] != 1 {
		t.Errorf("image_pools: %v", c.TierSettings.ImagePools)
	}
	if p := c.TierSettings.ImagePools["process"]; len(p) != 1 || p["node"] != 3 {
		t.Errorf("image_pools: %v", c.TierSettings.ImagePools)
	}
	for bad, want := range map[string]string{
		`{wasm: {python: 1}}`:       `tier "wasm" keeps no pools per image`,
		`{gvisor: {python: -1}}`:    "image_pools.gvisor.python: -1",
		`{gvisor: {python: 65}}`:    "image_pools.gvisor.python: 65",
		`{gvisor: {"": 1}}`:         "image_pools.gvisor: empty image",
		`{gvisor: {python: two}}`:   "configuration: json: cannot unmarshal",
		`{gvisor: [python]}`:        "configuration: json: cannot unmarshal",
		`{gvisor: {"Bad Ref!": 1}}`: "image_pools.gvisor",
	} {
		_, err := ParseConfig([]byte(base + "tier_settings:\n  image_pools: " + bad + "\n"))
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("image_pools: %s: %v, want one line with %q", bad, err, want)
		}
	}
}

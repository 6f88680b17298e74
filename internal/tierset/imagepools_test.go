package tierset

import (
	"strings"
	"testing"
)

// TestImagePoolsValidate refuses an image pool size out of range, naming
// the tier and the image.
func TestImagePoolsValidate(t *testing.T) {
	for _, o := range []Options{
		{ProcessImagePools: map[string]int{"node": 65}},
		{ProcessImagePools: map[string]int{"node": -1}},
		{GVisorImagePools: map[string]int{"node": -1}},
		{MicroVMImagePools: map[string]int{"node": 65}},
	} {
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), `image "node"`) {
			t.Errorf("%+v: %v", o, err)
		}
	}
	if err := (Options{ProcessImagePools: map[string]int{"node": 2}, GVisorImagePools: map[string]int{"python": 1}}).Validate(); err != nil {
		t.Error(err)
	}
}

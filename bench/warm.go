package bench

import "os"

// The warm forms of the tiers whose registrations build them cold by
// default (right for one-shot CLI runs) and read their warm settings from
// the environment: a process sandbox pool, a gVisor sandbox pool, a
// microVM snapshot and pool. A value the user already set is left alone.
func init() {
	RegisterWarm("process", withEnv(map[string]string{"AIRLOCK_PROCESS_POOL": "2"}))
	RegisterWarm("gvisor", withEnv(map[string]string{"AIRLOCK_GVISOR_POOL": "2"}))
	RegisterWarm("microvm", withEnv(map[string]string{"AIRLOCK_MICROVM_WARM": "snapshot", "AIRLOCK_MICROVM_POOL": "2"}))
}

// withEnv sets the variables that are unset, for the duration of a build.
func withEnv(vars map[string]string) WarmSetup {
	return func() func() {
		var set []string
		for k, v := range vars {
			if _, ok := os.LookupEnv(k); !ok {
				_ = os.Setenv(k, v)
				set = append(set, k)
			}
		}
		return func() {
			for _, k := range set {
				_ = os.Unsetenv(k)
			}
		}
	}
}

// Package kubernetes holds the kustomize base in this directory; its test
// decodes every manifest strictly into the Kubernetes API types and checks
// that they refer to each other correctly.
package kubernetes

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/airlock-sandbox/airlock/approve"
	"github.com/airlock-sandbox/airlock/server"
)

type kustomization struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Labels     []struct {
		Pairs map[string]string `json:"pairs"`
	} `json:"labels"`
	Resources []string `json:"resources"`
}

type manifests struct {
	deployment *appsv1.Deployment
	service    *corev1.Service
	pdb        *policyv1.PodDisruptionBudget
	hpa        *autoscalingv2.HorizontalPodAutoscaler
	netpol     *networkingv1.NetworkPolicy
	configMaps map[string]*corev1.ConfigMap
	secrets    map[string]*corev1.Secret
}

// load decodes every resource of the kustomization, refusing unknown
// fields, by its kind.
func load(t *testing.T) manifests {
	t.Helper()
	data, err := os.ReadFile("kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var k kustomization
	if err := yaml.UnmarshalStrict(data, &k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	m := manifests{configMaps: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{}}
	files, _ := os.ReadDir(".")
	for _, f := range files {
		if strings.HasSuffix(f.Name(), ".yaml") && f.Name() != "kustomization.yaml" && !slices.Contains(k.Resources, f.Name()) {
			t.Errorf("%s is not a resource of the kustomization", f.Name())
		}
	}
	for _, name := range k.Resources {
		data, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(data, &tm); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		strict := func(v any) {
			if err := yaml.UnmarshalStrict(data, v); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
		switch tm.APIVersion + " " + tm.Kind {
		case "apps/v1 Deployment":
			m.deployment = &appsv1.Deployment{}
			strict(m.deployment)
		case "v1 Service":
			m.service = &corev1.Service{}
			strict(m.service)
		case "policy/v1 PodDisruptionBudget":
			m.pdb = &policyv1.PodDisruptionBudget{}
			strict(m.pdb)
		case "autoscaling/v2 HorizontalPodAutoscaler":
			m.hpa = &autoscalingv2.HorizontalPodAutoscaler{}
			strict(m.hpa)
		case "networking.k8s.io/v1 NetworkPolicy":
			m.netpol = &networkingv1.NetworkPolicy{}
			strict(m.netpol)
		case "v1 ConfigMap":
			var cm corev1.ConfigMap
			strict(&cm)
			m.configMaps[cm.Name] = &cm
		case "v1 Secret":
			var s corev1.Secret
			strict(&s)
			m.secrets[s.Name] = &s
		default:
			t.Fatalf("%s: unexpected %s %s", name, tm.APIVersion, tm.Kind)
		}
	}
	if m.deployment == nil || m.service == nil || m.pdb == nil || m.hpa == nil || m.netpol == nil {
		t.Fatal("the base lacks a Deployment, Service, PodDisruptionBudget, HorizontalPodAutoscaler or NetworkPolicy")
	}
	return m
}

// selects reports whether sel selects a pod labelled labels.
func selects(t *testing.T, sel *metav1.LabelSelector, labels map[string]string) bool {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Fatal(err)
	}
	return !s.Empty() && s.Matches(labelSet(labels))
}

type labelSet map[string]string

func (l labelSet) Has(k string) bool              { _, ok := l[k]; return ok }
func (l labelSet) Get(k string) string            { return l[k] }
func (l labelSet) Lookup(k string) (string, bool) { v, ok := l[k]; return v, ok }

func TestManifests(t *testing.T) {
	m := load(t)
	d := m.deployment
	pod := d.Spec.Template
	podLabels := pod.Labels

	t.Run("selectors", func(t *testing.T) {
		if !selects(t, d.Spec.Selector, podLabels) {
			t.Error("the Deployment's selector does not select its pods")
		}
		if !selects(t, &metav1.LabelSelector{MatchLabels: m.service.Spec.Selector}, podLabels) {
			t.Error("the Service does not select the pods")
		}
		if !selects(t, m.pdb.Spec.Selector, podLabels) {
			t.Error("the PodDisruptionBudget does not select the pods")
		}
		if !selects(t, &m.netpol.Spec.PodSelector, podLabels) {
			t.Error("the NetworkPolicy does not select the pods")
		}
		ref := m.hpa.Spec.ScaleTargetRef
		if ref.Kind != "Deployment" || ref.Name != d.Name || ref.APIVersion != "apps/v1" {
			t.Errorf("the autoscaler scales %+v, not the Deployment %s", ref, d.Name)
		}
	})

	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("%d containers, want the one airlock", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
	port := func(p intstr.IntOrString) bool {
		for _, cp := range c.Ports {
			if (p.Type == intstr.String && p.StrVal == cp.Name) || (p.Type == intstr.Int && p.IntVal == cp.ContainerPort) {
				return true
			}
		}
		return false
	}

	t.Run("ports and probes", func(t *testing.T) {
		for _, sp := range m.service.Spec.Ports {
			if !port(sp.TargetPort) {
				t.Errorf("the Service's port %s targets %s, which the container does not expose", sp.Name, sp.TargetPort.String())
			}
		}
		probes := map[string]*corev1.Probe{"startup": c.StartupProbe, "readiness": c.ReadinessProbe, "liveness": c.LivenessProbe}
		want := map[string]string{"startup": "/readyz", "readiness": "/readyz", "liveness": "/healthz"}
		for name, p := range probes {
			if p == nil || p.HTTPGet == nil {
				t.Errorf("no %s probe over HTTP", name)
				continue
			}
			if p.HTTPGet.Path != want[name] || !port(p.HTTPGet.Port) {
				t.Errorf("the %s probe gets %s on %s, want %s on the container's port", name, p.HTTPGet.Path, p.HTTPGet.Port.String(), want[name])
			}
		}
		for _, rule := range m.netpol.Spec.Ingress {
			for _, p := range rule.Ports {
				if p.Port != nil && !port(*p.Port) {
					t.Errorf("the NetworkPolicy admits port %s, which the container does not expose", p.Port.String())
				}
			}
		}
		if c.SecurityContext == nil || c.SecurityContext.Privileged == nil || !*c.SecurityContext.Privileged {
			t.Error("the tiers need a privileged container (namespaces, cgroups, runsc, /dev/kvm)")
		}
	})

	t.Run("configmaps and secrets", func(t *testing.T) {
		mounts := map[string]string{}
		for _, vm := range c.VolumeMounts {
			mounts[vm.Name] = vm.MountPath
		}
		files := map[string]bool{} // paths the container sees
		for _, v := range pod.Spec.Volumes {
			if _, ok := mounts[v.Name]; !ok {
				t.Errorf("volume %s is not mounted", v.Name)
			}
			switch {
			case v.ConfigMap != nil:
				cm := m.configMaps[v.ConfigMap.Name]
				if cm == nil {
					t.Errorf("volume %s: no ConfigMap %s", v.Name, v.ConfigMap.Name)
					continue
				}
				for k := range cm.Data {
					files[mounts[v.Name]+"/"+k] = true
				}
			case v.Secret != nil:
				s := m.secrets[v.Secret.SecretName]
				if s == nil {
					t.Errorf("volume %s: no Secret %s", v.Name, v.Secret.SecretName)
					continue
				}
				if v.Secret.DefaultMode == nil || *v.Secret.DefaultMode&0o077 != 0 {
					t.Errorf("volume %s: key files must be private to their owner (defaultMode 0400)", v.Name)
				}
				for _, it := range v.Secret.Items {
					if _, ok := s.StringData[it.Key]; !ok {
						t.Errorf("volume %s: Secret %s has no key %s", v.Name, s.Name, it.Key)
					}
					files[mounts[v.Name]+"/"+it.Path] = true
				}
			}
		}
		// This file is public: a placeholder the server would take as an
		// approval key lets anyone who read it sign approvals for every
		// tenant of a base applied without its overlay.
		for _, sec := range m.secrets {
			if _, err := approve.NewSigner([]byte(sec.StringData["approval.key"])); err == nil {
				t.Errorf("Secret %s: the placeholder approval key is one the server would start with", sec.Name)
			}
		}
		for _, e := range c.Env {
			if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
				continue
			}
			ref := e.ValueFrom.SecretKeyRef
			if s := m.secrets[ref.Name]; s == nil {
				t.Errorf("env %s: no Secret %s", e.Name, ref.Name)
			} else if _, ok := s.StringData[ref.Key]; !ok {
				t.Errorf("env %s: Secret %s has no key %s", e.Name, ref.Name, ref.Key)
			}
		}

		// The server's configuration: the file the container is told to
		// read, valid, and consistent with the pod around it.
		i := slices.Index(c.Args, "--config")
		if i < 0 || i+1 >= len(c.Args) || !files[c.Args[i+1]] {
			t.Fatalf("the container reads its configuration from %v, which no ConfigMap provides (%v)", c.Args, files)
		}
		path := c.Args[i+1]
		var data string
		for _, cm := range m.configMaps {
			for k, v := range cm.Data {
				if strings.HasSuffix(path, "/"+k) {
					data = v
				}
			}
		}
		cfg, err := server.ParseConfig([]byte(data))
		if err != nil {
			t.Fatalf("the configuration: %v", err)
		}
		if cfg.Approvals == nil || !files[cfg.Approvals.KeyFile] {
			t.Errorf("approvals.key_file is not a mounted secret (%v)", files)
		}
		env := map[string]bool{}
		for _, e := range c.Env {
			env[e.Name] = true
		}
		for what, v := range map[string]string{"state": cfg.State, "advertise": cfg.Advertise} {
			name, ok := strings.CutPrefix(v, "env:")
			if !ok || !env[name] {
				t.Errorf("%s: %q is not taken from the container's environment", what, v)
			}
		}
		if !strings.HasSuffix(cfg.Listen, ":"+portNumber(c, "http")) {
			t.Errorf("the server listens on %s, not the container port", cfg.Listen)
		}
		// The pod is given the drain's grace and the preStop pause.
		grace := time.Duration(cfg.ShutdownGrace)
		if grace == 0 {
			grace = 10 * time.Second
		}
		var pause time.Duration
		if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
			pause = time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
		}
		if tg := pod.Spec.TerminationGracePeriodSeconds; tg == nil || time.Duration(*tg)*time.Second < grace+pause+5*time.Second {
			t.Errorf("terminationGracePeriodSeconds does not cover the preStop pause %s, shutdown_grace %s and a margin", pause, grace)
		}
	})

	t.Run("autoscaling metric", func(t *testing.T) {
		for _, ms := range m.hpa.Spec.Metrics {
			if ms.Pods == nil || ms.Pods.Metric.Name != "airlock_runs_queued" {
				t.Errorf("the autoscaler scales on %+v, want the run queue (airlock_runs_queued)", ms)
			}
		}
	})
}

func portNumber(c corev1.Container, name string) string {
	for _, p := range c.Ports {
		if p.Name == name {
			return strconv.Itoa(int(p.ContainerPort))
		}
	}
	return "?"
}

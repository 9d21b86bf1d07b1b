//go:build test_performance && upstream_bench_dump

// This file is not part of any package of this repository. hack/upstream-bench.sh adds it to
// upstream's sigs.k8s.io/karpenter/pkg/controllers/provisioning/scheduling directory at build time
// (`go test -overlay`), next to upstream's scheduling_benchmark_test.go. It lives in package
// scheduling_test so that it can use the benchmark's own unexported helpers (makeDiversePods,
// setupScheduler) and its seeded generator `r`: the input is then upstream's, not a re-implementation.
//
// The build tag upstream_bench_dump keeps it out of every build that does not ask for it; the
// benchmark file itself needs test_performance.
//
// Run one pod count per process (the script does), so that the peak RSS belongs to that size.

package scheduling_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	v1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/controllers/provisioning/scheduling"
	"sigs.k8s.io/karpenter/pkg/operator/injection"
	"sigs.k8s.io/karpenter/pkg/operator/options"
	pscheduling "sigs.k8s.io/karpenter/pkg/scheduling"
	"sigs.k8s.io/karpenter/pkg/test"
)

const (
	dumpEnvOut    = "UPSTREAM_BENCH_OUT"        // directory that receives pods.yaml, nodepool.yaml, catalog.json, upstream.json
	dumpEnvPods   = "UPSTREAM_BENCH_PODS"       // pod count, as in BenchmarkScheduling<N>
	dumpEnvRepeat = "UPSTREAM_BENCH_REPEAT"     // extra timed Solve calls on the same input (the benchmark's b.N loop)
	dumpEnvInput  = "UPSTREAM_BENCH_INPUT_ONLY" // "1": write the input files only; upstream's scheduler does not run
	dumpEnvSeed   = "UPSTREAM_BENCH_SEED"       // another seed for `r` (default: the benchmark's own, dumpSeed)

	// The seed of the benchmark's package-level generator `r` (scheduling_benchmark_test.go).
	dumpSeed int64 = 42
	// How many pending pods upstream.json shows with their errors.
	dumpPendingExamples = 10
	// The node class our simulator reads; upstream's test NodePool points at its fake test class.
	dumpNodeClassGroup = "karpenter.azure.com"
	dumpNodeClassKind  = "AKSNodeClass"
	dumpNodeClassName  = "default"
	dumpNodePoolName   = "default"
)

// Deterministic creation times: upstream's pods carry metav1.Now() from their generation, which orders
// pods of equal requests by generation order in the scheduler's queue (byCPUAndMemoryDescending). Fixed,
// strictly increasing times keep exactly that order and make the files reproducible.
var dumpEpoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func TestDumpUpstreamBenchmark(t *testing.T) {
	out := os.Getenv(dumpEnvOut)
	n, err := strconv.Atoi(os.Getenv(dumpEnvPods))
	if out == "" || err != nil || n <= 0 {
		t.Fatalf("set %s=<dir> and %s=<pod count>", dumpEnvOut, dumpEnvPods)
	}
	repeat := 0
	if s := os.Getenv(dumpEnvRepeat); s != "" {
		if repeat, err = strconv.Atoi(s); err != nil || repeat < 0 {
			t.Fatalf("%s=%q: want a count of 0 or more", dumpEnvRepeat, s)
		}
	}
	seed := dumpSeed
	if s := os.Getenv(dumpEnvSeed); s != "" {
		if seed, err = strconv.ParseInt(s, 10, 64); err != nil {
			t.Fatalf("%s=%q: want an integer seed", dumpEnvSeed, s)
		}
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}

	// 1. Upstream's input. `go test -bench '^BenchmarkScheduling<N>$'` starts from a fresh `r`, so its
	// first makeDiversePods(N) call sees seed 42 from the start; resetting `r` gives exactly that input
	// whatever ran before in this process. Another seed draws other pods from the same helpers.
	r = rand.New(rand.NewSource(seed)) //nolint:gosec
	pods := makeDiversePods(n)
	if len(pods) != n {
		t.Fatalf("makeDiversePods(%d) returned %d pods", n, len(pods))
	}
	// Upstream's pod and container names come from test.RandomName (random words) and its UIDs from
	// uuid.NewUUID: replace them with deterministic values before anything sees the pods, so the plan
	// and the files agree and the run is reproducible. Names say which helper built the pod; UIDs keep
	// generation order, the queue's tie-break after creation time. No name takes part in scheduling.
	podName, kinds := dumpNamePods(pods)
	inputOrder := slices.Clone(pods) // Solve sorts its argument in place

	// 2. Upstream's scheduler, set up as benchmarkScheduler does it.
	ctx = options.ToContext(injection.WithControllerName(context.Background(), "provisioner"), test.Options())
	scheduler, err := setupScheduler(ctx, pods, scheduling.NumConcurrentReconciles(5))
	if err != nil {
		t.Fatalf("creating scheduler: %s", err)
	}
	instanceTypes := cloudProvider.InstanceTypes // fake.InstanceTypes(400), set by setupScheduler

	// Input only (for sizes where only our solver is timed): the same files, no upstream.json.
	if os.Getenv(dumpEnvInput) == "1" {
		dumpWrite(t, filepath.Join(out, "pods.yaml"), dumpPodsYAML(t, inputOrder))
		dumpWrite(t, filepath.Join(out, "nodepool.yaml"), dumpNodePoolYAML(t))
		dumpWrite(t, filepath.Join(out, "catalog.json"), dumpJSON(t, dumpCatalog(instanceTypes)))
		fmt.Printf("SUMMARY %d pods: input only (upstream's scheduler not run)\n", n)
		return
	}

	// 3. One timed Solve, the body of the benchmark loop.
	runtime.GC()
	rssBefore := dumpProcStatusBytes(t, "VmHWM")
	var memBefore runtime.MemStats
	runtime.ReadMemStats(&memBefore)
	start := time.Now()
	results, err := scheduler.Solve(ctx, pods)
	solve := time.Since(start)
	if err != nil {
		t.Fatalf("Solve: %s", err)
	}
	rssPeak := dumpProcStatusBytes(t, "VmHWM")
	var memAfter runtime.MemStats
	runtime.ReadMemStats(&memAfter)

	// 4. The plan, as the provisioner would launch it: truncate the options (as provisioner.go does),
	// turn each NodeClaim into the API object (ToNodeClaim: its options cheapest first as an instance-type
	// requirement) and let upstream's fake cloud provider Create it. Create launches the cheapest
	// instance type compatible with the requirements that fits the requests, on the first compatible
	// available offering of that type (all of a fake type's offerings have one price).
	results = results.TruncateInstanceTypes(ctx, scheduling.MaxInstanceTypes)
	report := dumpReport{
		KarpenterVersion: dumpModuleVersion("sigs.k8s.io/karpenter"),
		GoVersion:        runtime.Version(),
		Benchmark:        fmt.Sprintf("BenchmarkScheduling%d (makeDiversePods(%d), seed %d, fake.InstanceTypes(400))", n, n, seed),
		Pods:             n,
		PodKinds:         kinds,
		InstanceTypes:    len(instanceTypes),
		SolveSeconds:     solve.Seconds(),
		PodsPerSecond:    float64(n) / solve.Seconds(),
		RSSBeforeSolve:   rssBefore,
		PeakRSS:          rssPeak,
		HeapAlloc:        memAfter.HeapAlloc,
		HeapAllocBefore:  memBefore.HeapAlloc,
		TotalAlloc:       memAfter.TotalAlloc,
		SolveTotalAlloc:  memAfter.TotalAlloc - memBefore.TotalAlloc,
		NodeClaims:       len(results.NewNodeClaims),
		Plan:             []dumpClaim{},
		Pending:          []dumpPending{},
		PricingRule: "per NodeClaim: results.TruncateInstanceTypes(MaxInstanceTypes), NodeClaim.ToNodeClaim(), " +
			"then upstream's fake CloudProvider.Create picks the cheapest compatible instance type that fits the " +
			"requests and the first compatible available offering of it; price is that offering's price",
	}
	placed := 0
	for i, nc := range results.NewNodeClaims {
		claimPods := make([]string, 0, len(nc.Pods))
		for _, p := range nc.Pods {
			claimPods = append(claimPods, podName[p.UID])
		}
		sort.Strings(claimPods)
		placed += len(claimPods)
		nOptions := len(nc.InstanceTypeOptions)
		cheapest := dumpCheapestOption(nc.InstanceTypeOptions, nc.Requirements)

		claim := nc.ToNodeClaim()
		claim.Name = fmt.Sprintf("upstream-%d", i)
		created, err := cloudProvider.Create(ctx, claim)
		if err != nil {
			t.Fatalf("fake Create of NodeClaim %d: %s", i, err)
		}
		it := created.Labels[corev1.LabelInstanceTypeStable]
		zone := created.Labels[corev1.LabelTopologyZone]
		capacityType := created.Labels[v1.CapacityTypeLabelKey]
		price, ok := dumpOfferingPrice(instanceTypes, it, zone, capacityType)
		if !ok {
			t.Fatalf("NodeClaim %d: no offering %s/%s/%s", i, it, zone, capacityType)
		}
		if math.Abs(price-cheapest) > 1e-9 {
			t.Errorf("NodeClaim %d: launched at %v, but its cheapest compatible option costs %v", i, price, cheapest)
		}
		report.PricePerHour += price
		report.Plan = append(report.Plan, dumpClaim{
			Name:                claim.Name,
			InstanceType:        it,
			Zone:                zone,
			CapacityType:        capacityType,
			Price:               price,
			InstanceTypeOptions: nOptions,
			Requests:            dumpQuantities(nc.Spec.Resources.Requests),
			Pods:                claimPods,
		})
	}
	report.PodsPlaced = placed
	report.PodsPending = len(results.PodErrors)
	for p, perr := range results.PodErrors {
		report.Pending = append(report.Pending, dumpPending{Pod: podName[p.UID], Error: perr.Error()})
	}
	sort.Slice(report.Pending, func(i, j int) bool { return report.Pending[i].Pod < report.Pending[j].Pod })
	report.PendingExamples = report.Pending[:min(len(report.Pending), dumpPendingExamples)]
	if placed+len(results.PodErrors) != n {
		t.Errorf("%d pods placed + %d pending != %d", placed, len(results.PodErrors), n)
	}

	// 5. More Solve calls on the same scheduler and pods, as the benchmark's b.N loop does (timing only).
	for range repeat {
		start := time.Now()
		if _, err := scheduler.Solve(ctx, pods); err != nil {
			t.Fatalf("repeated Solve: %s", err)
		}
		report.RepeatSolveSeconds = append(report.RepeatSolveSeconds, time.Since(start).Seconds())
	}

	// 6. The files.
	dumpWrite(t, filepath.Join(out, "pods.yaml"), dumpPodsYAML(t, inputOrder))
	dumpWrite(t, filepath.Join(out, "nodepool.yaml"), dumpNodePoolYAML(t))
	dumpWrite(t, filepath.Join(out, "catalog.json"), dumpJSON(t, dumpCatalog(instanceTypes)))
	dumpWrite(t, filepath.Join(out, "upstream.json"), dumpJSON(t, report))
	// One line for hack/upstream-bench.sh to print.
	fmt.Printf("SUMMARY %d pods: solve %.3fs, placed %d, pending %d, %d nodeclaims, %.2f $/h, peak RSS %d MiB\n",
		n, solve.Seconds(), placed, len(results.PodErrors), len(results.NewNodeClaims), report.PricePerHour, rssPeak>>20)
}

type dumpReport struct {
	KarpenterVersion   string         `json:"karpenter_version"`
	GoVersion          string         `json:"go_version"`
	Benchmark          string         `json:"benchmark"`
	Pods               int            `json:"pods"`
	PodKinds           map[string]int `json:"pod_kinds"`
	InstanceTypes      int            `json:"instance_types"`
	SolveSeconds       float64        `json:"solve_seconds"`
	RepeatSolveSeconds []float64      `json:"repeat_solve_seconds,omitempty"`
	PodsPerSecond      float64        `json:"pods_per_second"`
	PodsPlaced         int            `json:"pods_placed"`
	PodsPending        int            `json:"pods_pending"`
	PendingExamples    []dumpPending  `json:"pending_examples"`
	NodeClaims         int            `json:"nodeclaims"`
	PricePerHour       float64        `json:"price_per_hour"`
	PricingRule        string         `json:"pricing_rule"`
	RSSBeforeSolve     uint64         `json:"rss_before_solve_bytes"`
	PeakRSS            uint64         `json:"peak_rss_bytes"`
	HeapAllocBefore    uint64         `json:"heap_alloc_before_solve_bytes"`
	HeapAlloc          uint64         `json:"heap_alloc_bytes"`
	TotalAlloc         uint64         `json:"total_alloc_bytes"`
	SolveTotalAlloc    uint64         `json:"solve_total_alloc_bytes"`
	Plan               []dumpClaim    `json:"plan"`
	Pending            []dumpPending  `json:"pending"`
}

type dumpClaim struct {
	Name                string            `json:"name"`
	InstanceType        string            `json:"instance_type"`
	Zone                string            `json:"zone"`
	CapacityType        string            `json:"capacity_type"`
	Price               float64           `json:"price"`
	InstanceTypeOptions int               `json:"instance_type_options"`
	Requests            map[string]string `json:"requests"`
	Pods                []string          `json:"pods"`
}

type dumpPending struct {
	Pod   string `json:"pod"`
	Error string `json:"error"`
}

type dumpCatalogEntry struct {
	Name        string             `json:"name"`
	Labels      map[string]string  `json:"labels"`
	Allocatable map[string]string  `json:"allocatable"`
	Capacity    map[string]string  `json:"capacity"`
	Offerings   []dumpCatalogOffer `json:"offerings"`
}

type dumpCatalogOffer struct {
	Zone         string  `json:"zone"`
	CapacityType string  `json:"capacity_type"`
	Price        float64 `json:"price"`
	Available    bool    `json:"available"`
}

// dumpNamePods gives the pods deterministic names (`<kind>-<index>`), UIDs, creation times and
// container names in generation order; it returns `ns/name` by UID and the number of pods of each kind.
func dumpNamePods(pods []*corev1.Pod) (map[types.UID]string, map[string]int) {
	podName := map[types.UID]string{}
	kinds := map[string]int{}
	width := len(strconv.Itoa(max(len(pods)-1, 0)))
	for i, p := range pods {
		kind := dumpPodKind(p)
		kinds[kind]++
		p.Name = fmt.Sprintf("%s-%0*d", kind, width, i)
		p.UID = types.UID(fmt.Sprintf("00000000-0000-0000-0000-%012d", i))
		p.CreationTimestamp = metav1.NewTime(dumpEpoch.Add(time.Duration(i) * time.Microsecond))
		for c := range p.Spec.Containers {
			p.Spec.Containers[c].Name = fmt.Sprintf("c%d", c)
		}
		podName[p.UID] = p.Namespace + "/" + p.Name
	}
	return podName, kinds
}

// dumpPodKind names a pod after the makeDiversePods helper that built it, read from its spec.
func dumpPodKind(p *corev1.Pod) string {
	short := func(key string) string {
		switch key {
		case corev1.LabelHostname:
			return "hostname"
		case corev1.LabelTopologyZone:
			return "zone"
		}
		return strings.NewReplacer("/", "-", ".", "-").Replace(key)
	}
	if a := p.Spec.Affinity; a != nil {
		if a.PodAntiAffinity != nil && len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) > 0 {
			return "anti-affinity-" + short(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0].TopologyKey)
		}
		if a.PodAffinity != nil && len(a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution) > 0 {
			return "affinity-" + short(a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0].TopologyKey)
		}
	}
	if len(p.Spec.TopologySpreadConstraints) > 0 {
		return "spread-" + short(p.Spec.TopologySpreadConstraints[0].TopologyKey)
	}
	return "generic"
}

// dumpCheapestOption is the price the scheduler's own ordering (OrderByPrice) puts first: the cheapest
// available offering compatible with the NodeClaim's requirements, over its instance-type options. It
// cross-checks the price of what the fake provider launched.
func dumpCheapestOption(its []*cloudprovider.InstanceType, reqs pscheduling.Requirements) float64 {
	cheapest := math.Inf(1)
	for _, it := range its {
		if offerings := it.Offerings.Available().Compatible(reqs); len(offerings) > 0 {
			cheapest = math.Min(cheapest, offerings.Cheapest().Price)
		}
	}
	return cheapest
}

func dumpOfferingPrice(its []*cloudprovider.InstanceType, name, zone, capacityType string) (float64, bool) {
	for _, it := range its {
		if it.Name != name {
			continue
		}
		for _, o := range it.Offerings {
			if o.Available && o.Zone() == zone && o.CapacityType() == capacityType {
				return o.Price, true
			}
		}
	}
	return 0, false
}

func dumpCatalog(its []*cloudprovider.InstanceType) []dumpCatalogEntry {
	entries := make([]dumpCatalogEntry, 0, len(its))
	for _, it := range its {
		labels := map[string]string{}
		for key, req := range it.Requirements {
			// Zone and capacity type are per offering; DoesNotExist/NotIn requirements set no label.
			if key == corev1.LabelTopologyZone || key == v1.CapacityTypeLabelKey || req.Operator() != corev1.NodeSelectorOpIn {
				continue
			}
			values := req.Values()
			switch {
			case len(values) == 1:
				labels[key] = values[0]
			case key == corev1.LabelOSStable && slices.Contains(values, string(corev1.Linux)):
				// Fake types offer linux, windows and darwin; a label has one value, and no
				// benchmark pod selects an OS.
				labels[key] = string(corev1.Linux)
			}
		}
		entry := dumpCatalogEntry{
			Name:   it.Name,
			Labels: labels,
			// What the scheduler fits pods against: capacity minus the fake kube-reserved overhead.
			Allocatable: dumpQuantities(it.Allocatable()),
			Capacity:    dumpQuantities(it.Capacity),
		}
		for _, o := range it.Offerings {
			entry.Offerings = append(entry.Offerings, dumpCatalogOffer{
				Zone: o.Zone(), CapacityType: o.CapacityType(), Price: o.Price, Available: o.Available,
			})
		}
		entries = append(entries, entry)
	}
	return entries
}

func dumpQuantities(list corev1.ResourceList) map[string]string {
	out := map[string]string{}
	for name, q := range list {
		if !q.IsZero() {
			out[string(name)] = q.String()
		}
	}
	return out
}

// dumpPodsYAML writes the pods as upstream built them, marked the way kube-scheduler leaves a pod it
// could not place (the controller batches only such pods; the simulator needs just no nodeName).
func dumpPodsYAML(t *testing.T, pods []*corev1.Pod) []byte {
	var b strings.Builder
	for _, p := range pods {
		p = p.DeepCopy()
		p.APIVersion, p.Kind = "v1", "Pod"
		p.Status.Phase = corev1.PodPending
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{
			Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
		})
		b.WriteString("---\n")
		b.Write(dumpYAML(t, p))
	}
	return []byte(b.String())
}

// dumpNodePoolYAML builds the benchmark's NodePool with the same test.NodePool call and limits as
// setupScheduler (which does not hand it out); the name is fixed instead of random and the node class
// reference points at an AKSNodeClass, the kind our simulator accepts.
func dumpNodePoolYAML(t *testing.T) []byte {
	np := test.NodePool(v1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Name: dumpNodePoolName},
		Spec: v1.NodePoolSpec{
			Limits: v1.Limits{
				corev1.ResourceCPU:    resource.MustParse("10000000"),
				corev1.ResourceMemory: resource.MustParse("10000000Gi"),
			},
		},
	})
	np.APIVersion, np.Kind = "karpenter.sh/v1", "NodePool"
	np.Spec.Template.Spec.NodeClassRef = &v1.NodeClassReference{
		Group: dumpNodeClassGroup, Kind: dumpNodeClassKind, Name: dumpNodeClassName,
	}
	// Spec and metadata only, as one would `kubectl apply` it: the status (test conditions) and the
	// creation time are the API server's.
	obj := map[string]any{}
	if err := json.Unmarshal(dumpJSON(t, np), &obj); err != nil {
		t.Fatal(err)
	}
	delete(obj, "status")
	delete(obj["metadata"].(map[string]any), "creationTimestamp")
	return dumpYAML(t, obj)
}

func dumpYAML(t *testing.T, v any) []byte {
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func dumpJSON(t *testing.T, v any) []byte {
	b, err := json.MarshalIndent(v, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

func dumpWrite(t *testing.T, path string, data []byte) {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// dumpProcStatusBytes reads a "kB" line of /proc/self/status (VmHWM: the peak resident set size).
func dumpProcStatusBytes(t *testing.T, key string) uint64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Logf("no /proc/self/status: %s", err)
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, key+":"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return 0
}

func dumpModuleVersion(path string) string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, m := range append([]*debug.Module{&info.Main}, info.Deps...) {
			if m.Path == path {
				return m.Version
			}
		}
	}
	return "unknown"
}

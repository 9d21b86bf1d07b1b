//go:build test_performance && upstream_bench_dump && upstream_disruption_bench

// This file is not part of any package of this repository. hack/upstream-disruption.sh adds it, with
// zz_dump_test.go (whose writers it uses), to upstream's
// sigs.k8s.io/karpenter/pkg/controllers/provisioning/scheduling directory at build time (`go test
// -overlay`), next to upstream's scheduling_benchmark_test.go, so that the cluster is built from the
// benchmark's own pods (makeDiversePods) and its 400 fake instance types.
//
// One process builds one cluster state (a size and a shape) and runs upstream's disruption methods on
// it once per consolidation policy:
//  1. an API server (envtest, as upstream's suites start it: test.NewEnvironment), upstream's fake cloud
//     provider with fake.InstanceTypes(400), upstream's cluster state, provisioner and disruption queue,
//     wired as BeforeSuite in pkg/controllers/disruption/suite_test.go wires them;
//  2. makeDiversePods(5 × nodes) packed by upstream's provisioner (expectations.ExpectProvisioned:
//     Schedule, fake Create, Node, binding), every NodeClaim then initialized and Consolidatable;
//  3. the shape: pods deleted (uniform, zone-drained, fragmented) or NodeClaims relabelled on-demand
//     (spot-mixed) before pods are deleted;
//  4. the objects written for `karpenter-azure simulate`;
//  5. per policy, one disruption pass timed: for each method in NewMethods' order, GetCandidatesWithTotals,
//     BuildDisruptionBudgetMapping and ComputeCommands, stopping at the first method with a command (what
//     Controller.disrupt does in pkg/controllers/disruption/controller.go before StartCommand). Validators are
//     no-ops, as in the disruption suite's default NewMethodsWithNopValidator (validation_test.go): the real
//     one waits 15 s on the clock and then re-runs the same simulation.

package scheduling_test

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	coreapis "sigs.k8s.io/karpenter/pkg/apis"
	v1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider/fake"
	"sigs.k8s.io/karpenter/pkg/controllers/disruption"
	"sigs.k8s.io/karpenter/pkg/controllers/dynamicresources/deviceallocation"
	"sigs.k8s.io/karpenter/pkg/controllers/provisioning"
	"sigs.k8s.io/karpenter/pkg/controllers/state"
	"sigs.k8s.io/karpenter/pkg/controllers/state/informer"
	"sigs.k8s.io/karpenter/pkg/operator/options"
	"sigs.k8s.io/karpenter/pkg/state/cost"
	"sigs.k8s.io/karpenter/pkg/state/virtualpods"
	"sigs.k8s.io/karpenter/pkg/test"
	. "sigs.k8s.io/karpenter/pkg/test/expectations"
	"sigs.k8s.io/karpenter/pkg/test/v1alpha1"
)

const (
	disruptEnvOut      = "UPSTREAM_DISRUPTION_OUT"      // directory that receives the cluster files and upstream.json
	disruptEnvNodes    = "UPSTREAM_DISRUPTION_NODES"    // the size, in nodes (5 benchmark pods per node)
	disruptEnvShape    = "UPSTREAM_DISRUPTION_SHAPE"    // uniform, zone-drained, fragmented, spot-mixed; "-no-empty" drops empty nodes
	disruptEnvPolicies = "UPSTREAM_DISRUPTION_POLICIES" // comma-separated consolidation policies
	disruptEnvFraction = "UPSTREAM_DISRUPTION_REMOVE"   // fraction of pods removed (uniform, fragmented, spot-mixed)

	// makeDiversePods makes a fifth of its pods anti-affine to each other on the hostname, so upstream's
	// scheduler opens about one node per five pods (1,000 pods: 200 NodeClaims, see hack/upstream-bench).
	disruptPodsPerNode = 5
	// Seed of the pods removed by the random shapes; the pods themselves use the benchmark's seed.
	disruptRemoveSeed int64 = 7
)

func TestDumpUpstreamDisruption(t *testing.T) {
	RegisterFailHandler(func(message string, _ ...int) { panic(message) })
	out := os.Getenv(disruptEnvOut)
	nodes, err := strconv.Atoi(os.Getenv(disruptEnvNodes))
	shape := os.Getenv(disruptEnvShape)
	if out == "" || err != nil || nodes <= 0 || shape == "" {
		t.Fatalf("set %s=<dir>, %s=<nodes> and %s=<shape>", disruptEnvOut, disruptEnvNodes, disruptEnvShape)
	}
	policies := strings.Split(os.Getenv(disruptEnvPolicies), ",")
	if os.Getenv(disruptEnvPolicies) == "" {
		policies = []string{string(v1.ConsolidationPolicyWhenEmptyOrUnderutilized), string(v1.ConsolidationPolicyBalanced)}
	}
	fraction := 0.5
	if s := os.Getenv(disruptEnvFraction); s != "" {
		if fraction, err = strconv.ParseFloat(s, 64); err != nil || fraction < 0 || fraction > 1 {
			t.Fatalf("%s=%q: want a fraction in [0, 1]", disruptEnvFraction, s)
		}
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}

	// 1. Upstream's environment, as the disruption suite's BeforeSuite and BeforeEach build it.
	env = test.NewEnvironment(test.WithCRDs(coreapis.CRDs...), test.WithCRDs(v1alpha1.CRDs...))
	defer func() { _ = env.Stop() }()
	ctx = options.ToContext(context.Background(), test.Options())
	cloudProvider = fake.NewCloudProvider()
	cloudProvider.InstanceTypes = fake.InstanceTypes(400)
	clusterCost = cost.NewClusterCost(ctx, cloudProvider, env.Client)
	pricing := informer.NewPricingController(env.Client, cloudProvider, clusterCost)
	cluster = state.NewCluster(env.Clock, env.Client, cloudProvider)
	nodeStateController = informer.NewNodeController(env.Client, cluster)
	nodeClaimStateController = informer.NewNodeClaimController(env.Client, cloudProvider, cluster, clusterCost)
	podStateController = informer.NewPodController(env.Client, cluster)
	recorder := test.NewEventRecorder()
	prov = provisioning.NewProvisioner(env.Client, recorder, cloudProvider, cluster, env.Clock,
		deviceallocation.NewController(env.Client), virtualpods.NewVirtualPodCache(env.Client))
	queue := disruption.NewQueue(env.Client, recorder, cluster, env.Clock, prov)
	ExpectSingletonReconciled(ctx, pricing)

	nodePool := test.NodePool(v1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Name: dumpNodePoolName},
		Spec: v1.NodePoolSpec{
			Limits: v1.Limits{
				corev1.ResourceCPU:    resource.MustParse("10000000"),
				corev1.ResourceMemory: resource.MustParse("10000000Gi"),
			},
			Disruption: v1.Disruption{
				ConsolidateAfter:    v1.MustParseNillableDuration("0s"),
				ConsolidationPolicy: v1.ConsolidationPolicy(policies[0]),
			},
		},
	})
	ExpectApplied(ctx, env.Client, nodePool)

	// 2. The benchmark's pods, packed by upstream's provisioner.
	r = rand.New(rand.NewSource(dumpSeed)) //nolint:gosec
	pods := makeDiversePods(nodes * disruptPodsPerNode)
	dumpNamePods(pods)
	for _, p := range pods {
		// The API server gives each pod its UID; a UID set beforehand fails ExpectApplied's status update.
		p.UID = ""
		// What kube-scheduler leaves on a pod it cannot place; the provisioner takes only such pods.
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{
			Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
		})
	}
	start := time.Now()
	ExpectProvisioned(ctx, env.Client, cluster, cloudProvider, prov, pods...)
	provisionSeconds := time.Since(start).Seconds()
	nodeClaims := disruptList[v1.NodeClaim](t, &v1.NodeClaimList{})
	nodeList := disruptList[corev1.Node](t, &corev1.NodeList{})
	if shape == "spot-mixed" {
		// Every second NodeClaim (in name order) becomes on-demand; upstream's fake Create launches the
		// first compatible offering, which is spot, so the packing itself is all spot.
		byProvider := map[string]*corev1.Node{}
		for _, n := range nodeList {
			byProvider[n.Spec.ProviderID] = n
		}
		for i, nc := range nodeClaims {
			if i%2 == 1 {
				nc.Labels[v1.CapacityTypeLabelKey] = v1.CapacityTypeOnDemand
				if n := byProvider[nc.Status.ProviderID]; n != nil {
					n.Labels[v1.CapacityTypeLabelKey] = v1.CapacityTypeOnDemand
				}
			}
		}
	}
	for _, nc := range nodeClaims {
		nc.StatusConditions().SetTrue(v1.ConditionTypeConsolidatable)
	}
	ExpectApplied(ctx, env.Client, disruptObjects(nodeList)...)
	ExpectApplied(ctx, env.Client, disruptObjects(nodeClaims)...)
	ExpectMakeNodesAndNodeClaimsInitializedAndStateUpdated(ctx, env.Client, env.Clock, nodeStateController, nodeClaimStateController, nodeList, nodeClaims)

	// 3. The shape.
	bound := disruptBound(disruptList[corev1.Pod](t, &corev1.PodList{}))
	base, noEmpty := strings.CutSuffix(shape, "-no-empty")
	removed := disruptRemoved(base, bound, nodeList, fraction)
	for _, p := range removed {
		ExpectDeleted(ctx, env.Client, p)
		ExpectReconcileSucceeded(ctx, podStateController, client.ObjectKeyFromObject(p))
	}
	if noEmpty {
		// "<shape>-no-empty": the nodes the shape left empty are gone too (as if emptiness had already
		// run), so the pass has only consolidation to do.
		disruptDropEmpty(t, nodeClaims, nodeList)
	}

	// 4. The cluster as it is now.
	nodeClaims = disruptList[v1.NodeClaim](t, &v1.NodeClaimList{})
	nodeList = disruptList[corev1.Node](t, &corev1.NodeList{})
	remaining := disruptBound(disruptList[corev1.Pod](t, &corev1.PodList{}))
	podsOn := map[string]int{}
	for _, p := range remaining {
		podsOn[p.Spec.NodeName]++
	}
	priceBefore := 0.0
	for _, n := range nodeList {
		price, ok := dumpOfferingPrice(cloudProvider.InstanceTypes, n.Labels[corev1.LabelInstanceTypeStable],
			n.Labels[corev1.LabelTopologyZone], n.Labels[v1.CapacityTypeLabelKey])
		if !ok {
			t.Fatalf("node %s: no offering for its labels", n.Name)
		}
		priceBefore += price
	}
	disruptWriteCluster(t, out, nodeList, nodeClaims, remaining)

	report := disruptReport{
		KarpenterVersion: dumpModuleVersion("sigs.k8s.io/karpenter"),
		GoVersion:        runtime.Version(),
		Input: fmt.Sprintf("makeDiversePods(%d) (seed %d), fake.InstanceTypes(400), packed by the provisioner",
			nodes*disruptPodsPerNode, dumpSeed),
		Shape:            shape,
		SizeNodes:        nodes,
		Nodes:            len(nodeList),
		PodsPacked:       len(bound),
		PodsPending:      len(pods) - len(bound),
		PodsRemoved:      len(removed),
		Pods:             len(remaining),
		PricePerHour:     priceBefore,
		ProvisionSeconds: provisionSeconds,
		Policies:         []disruptPolicyResult{},
	}

	// 5. One pass per policy on the same state (no command is started, so the state does not change).
	for _, policy := range policies {
		np := &v1.NodePool{}
		Expect(env.Client.Get(ctx, client.ObjectKey{Name: dumpNodePoolName}, np)).To(Succeed())
		np.Spec.Disruption.ConsolidationPolicy = v1.ConsolidationPolicy(policy)
		ExpectApplied(ctx, env.Client, np)
		cluster.MarkUnconsolidated()
		c := disruption.MakeConsolidation(env.Clock, cluster, env.Client, prov, cloudProvider, recorder, queue)
		nop := disruption.WithValidator(disruptNopValidator{})
		methods := []disruption.Method{
			disruption.NewEmptiness(c, nop),
			disruption.NewStaticDrift(cluster, prov, cloudProvider),
			disruption.NewDrift(env.Client, cluster, prov, recorder, env.Clock),
			disruption.NewMultiNodeConsolidation(c, nop),
			disruption.NewSingleNodeConsolidation(c, nop),
		}
		result := disruptPolicyResult{Policy: policy, Synced: cluster.Synced(ctx), Commands: []disruptCommand{}}
		runtime.GC()
		start := time.Now()
		var cmds []disruption.Command
		for _, m := range methods {
			if cmds = disruptPass(t, m, queue, recorder); len(cmds) > 0 {
				result.Method = fmt.Sprintf("%s/%s", m.Reason(), m.ConsolidationType())
				break
			}
		}
		result.PassSeconds = time.Since(start).Seconds()
		result.PeakRSS = dumpProcStatusBytes(t, "VmHWM")
		result.PriceAfter = priceBefore
		for _, cmd := range cmds {
			dc := disruptCommand{Decision: string(cmd.Decision()), Reason: string(cmd.Reason()), Candidates: []disruptCandidate{},
				Replacements: []disruptReplacement{}, Moves: []disruptMove{}}
			for _, cand := range cmd.Candidates {
				n := cand.Node
				dc.Candidates = append(dc.Candidates, disruptCandidate{
					Node: n.Name, NodeClaim: cand.NodeClaim.Name, InstanceType: n.Labels[corev1.LabelInstanceTypeStable],
					Zone: n.Labels[corev1.LabelTopologyZone], CapacityType: n.Labels[v1.CapacityTypeLabelKey],
					Price: cand.Price, Pods: podsOn[n.Name],
				})
				result.NodesRemoved++
				result.PodsMoved += podsOn[n.Name]
				result.PriceAfter -= cand.Price
			}
			for _, existing := range cmd.Results.ExistingNodes {
				for _, p := range existing.Pods {
					dc.Moves = append(dc.Moves, disruptMove{Pod: p.Namespace + "/" + p.Name, To: existing.Name()})
				}
			}
			for _, rep := range cmd.Replacements {
				r := disruptCheapest(rep)
				r.Name = fmt.Sprintf("upstream-replacement-%d", result.NodesCreated)
				r.InstanceTypeOptions = len(rep.InstanceTypeOptions)
				r.Pods = []string{}
				for _, p := range rep.Pods {
					r.Pods = append(r.Pods, p.Namespace+"/"+p.Name)
					dc.Moves = append(dc.Moves, disruptMove{Pod: p.Namespace + "/" + p.Name, To: r.Name})
				}
				sort.Strings(r.Pods)
				dc.Replacements = append(dc.Replacements, r)
				price := r.Price
				result.NodesCreated++
				result.PriceAfter += price
			}
			result.Commands = append(result.Commands, dc)
		}
		result.Savings = priceBefore - result.PriceAfter
		report.Policies = append(report.Policies, result)
		fmt.Printf("SUMMARY %d nodes %s %s: %d nodes, %d pods, %.2f $/h; %s: %d commands, -%d +%d nodes, %.2f $/h saved, %d pods moved, pass %.3fs\n",
			nodes, shape, policy, len(nodeList), len(remaining), priceBefore, result.Method, len(result.Commands),
			result.NodesRemoved, result.NodesCreated, result.Savings, result.PodsMoved, result.PassSeconds)
	}
	report.PeakRSS = dumpProcStatusBytes(t, "VmHWM")
	dumpWrite(t, filepath.Join(out, "upstream.json"), dumpJSON(t, report))
}

// disruptPass is Controller.disrupt (controller.go) up to, not including, StartCommand.
func disruptPass(t *testing.T, m disruption.Method, queue *disruption.Queue, recorder *test.EventRecorder) []disruption.Command {
	candidates, totals, err := disruption.GetCandidatesWithTotals(ctx, cluster, env.Client, recorder, env.Clock, cloudProvider,
		m.ShouldDisrupt, m.Class(), queue, clusterCost)
	if err != nil {
		t.Fatalf("candidates: %s", err)
	}
	if len(candidates) == 0 {
		return nil
	}
	if setter, ok := m.(disruption.NodePoolTotalsSetter); ok {
		setter.SetNodePoolTotals(totals)
	}
	budgets, err := disruption.BuildDisruptionBudgetMapping(ctx, cluster, env.Clock, env.Client, cloudProvider, recorder, m.Reason())
	if err != nil {
		t.Fatalf("budgets: %s", err)
	}
	cmds, err := m.ComputeCommands(ctx, budgets, candidates...)
	if err != nil {
		t.Fatalf("%s: %s", m.Reason(), err)
	}
	var kept []disruption.Command
	for _, c := range cmds {
		if c.Decision() != disruption.NoOpDecision {
			c.Method = m // as Controller.disrupt assigns it
			kept = append(kept, c)
		}
	}
	return kept
}

// disruptDropEmpty deletes the Nodes without pods and their NodeClaims (finalizers dropped: nothing
// here terminates them) and tells the cluster state.
func disruptDropEmpty(t *testing.T, claims []*v1.NodeClaim, nodes []*corev1.Node) {
	used := map[string]bool{}
	for _, p := range disruptBound(disruptList[corev1.Pod](t, &corev1.PodList{})) {
		used[p.Spec.NodeName] = true
	}
	byProvider := map[string]*v1.NodeClaim{}
	for _, nc := range claims {
		byProvider[nc.Status.ProviderID] = nc
	}
	for _, n := range nodes {
		if used[n.Name] {
			continue
		}
		objs := []client.Object{n}
		if nc := byProvider[n.Spec.ProviderID]; nc != nil {
			objs = append(objs, nc)
		}
		for _, o := range objs {
			Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(o), o)).To(Succeed())
			o.SetFinalizers(nil)
			Expect(env.Client.Update(ctx, o)).To(Succeed())
			ExpectDeleted(ctx, env.Client, o)
		}
		ExpectReconcileSucceeded(ctx, nodeStateController, client.ObjectKeyFromObject(n))
		if nc := byProvider[n.Spec.ProviderID]; nc != nil {
			ExpectReconcileSucceeded(ctx, nodeClaimStateController, client.ObjectKeyFromObject(nc))
		}
	}
}

// disruptCheapest is what upstream's fake Create launches for a replacement: the cheapest compatible
// available offering over its instance-type options (pkg/cloudprovider/fake/cloudprovider.go).
func disruptCheapest(rep *disruption.Replacement) disruptReplacement {
	best := disruptReplacement{Price: -1}
	for _, it := range rep.InstanceTypeOptions {
		if offerings := it.Offerings.Available().Compatible(rep.Requirements); len(offerings) > 0 {
			if o := offerings.Cheapest(); best.Price < 0 || o.Price < best.Price {
				best = disruptReplacement{InstanceType: it.Name, Zone: o.Zone(), CapacityType: o.CapacityType(), Price: o.Price}
			}
		}
	}
	return best
}

// disruptRemoved picks the pods a shape deletes.
func disruptRemoved(shape string, pods []*corev1.Pod, nodes []*corev1.Node, fraction float64) []*corev1.Pod {
	rnd := rand.New(rand.NewSource(disruptRemoveSeed)) //nolint:gosec
	var removed []*corev1.Pod
	switch shape {
	case "uniform":
		// The same fraction of every kind of pod (every "deployment" scaled down alike), in name order.
		byKind := map[string][]*corev1.Pod{}
		for _, p := range pods {
			byKind[dumpPodKind(p)] = append(byKind[dumpPodKind(p)], p)
		}
		for _, kind := range disruptKeys(byKind) {
			group := byKind[kind]
			drop := int(float64(len(group))*fraction + 0.5)
			for i := 0; i < drop; i++ {
				removed = append(removed, group[i*len(group)/max(drop, 1)])
			}
		}
	case "zone-drained":
		// Every pod on the nodes of the first zone (in name order) leaves.
		zones := map[string][]string{}
		for _, n := range nodes {
			zones[n.Labels[corev1.LabelTopologyZone]] = append(zones[n.Labels[corev1.LabelTopologyZone]], n.Name)
		}
		zone := disruptKeys(zones)[0]
		in := map[string]bool{}
		for _, n := range zones[zone] {
			in[n] = true
		}
		for _, p := range pods {
			if in[p.Spec.NodeName] {
				removed = append(removed, p)
			}
		}
	case "fragmented", "spot-mixed":
		// A day-end cluster: pods removed at random.
		for _, p := range pods {
			if rnd.Float64() < fraction {
				removed = append(removed, p)
			}
		}
	default:
		panic(fmt.Sprintf("unknown shape %q (uniform, zone-drained, fragmented, spot-mixed)", shape))
	}
	return removed
}

func disruptKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// disruptBound keeps the bound pods, in name order.
func disruptBound(pods []*corev1.Pod) []*corev1.Pod {
	var bound []*corev1.Pod
	for _, p := range pods {
		if p.Spec.NodeName != "" {
			bound = append(bound, p)
		}
	}
	sort.Slice(bound, func(i, j int) bool { return bound[i].Name < bound[j].Name })
	return bound
}

func disruptList[T any, PT interface {
	*T
	client.Object
}](t *testing.T, list client.ObjectList) []PT {
	if err := env.Client.List(ctx, list); err != nil {
		t.Fatal(err)
	}
	var items []PT
	switch l := list.(type) {
	case *v1.NodeClaimList:
		for i := range l.Items {
			items = append(items, any(&l.Items[i]).(PT))
		}
	case *corev1.NodeList:
		for i := range l.Items {
			items = append(items, any(&l.Items[i]).(PT))
		}
	case *corev1.PodList:
		for i := range l.Items {
			items = append(items, any(&l.Items[i]).(PT))
		}
	}
	sort.Slice(items, func(i, j int) bool { return items[i].GetName() < items[j].GetName() })
	return items
}

func disruptObjects[T client.Object](items []T) []client.Object {
	objs := make([]client.Object, len(items))
	for i, o := range items {
		objs[i] = o
	}
	return objs
}

// disruptWriteCluster writes nodes.yaml, nodeclaims.yaml, pods.yaml, nodepool.yaml and catalog.json. Node
// classes point at AKSNodeClass "default", the kind our simulator reads; server-set metadata is dropped.
func disruptWriteCluster(t *testing.T, out string, nodes []*corev1.Node, claims []*v1.NodeClaim, pods []*corev1.Pod) {
	var b strings.Builder
	for _, n := range nodes {
		n = n.DeepCopy()
		n.APIVersion, n.Kind = "v1", "Node"
		disruptCleanMeta(&n.ObjectMeta)
		b.WriteString("---\n")
		b.Write(dumpYAML(t, n))
	}
	dumpWrite(t, filepath.Join(out, "nodes.yaml"), []byte(b.String()))
	b.Reset()
	for _, nc := range claims {
		nc = nc.DeepCopy()
		nc.APIVersion, nc.Kind = "karpenter.sh/v1", "NodeClaim"
		disruptCleanMeta(&nc.ObjectMeta)
		nc.Spec.NodeClassRef = &v1.NodeClassReference{Group: dumpNodeClassGroup, Kind: dumpNodeClassKind, Name: dumpNodeClassName}
		b.WriteString("---\n")
		b.Write(dumpYAML(t, nc))
	}
	dumpWrite(t, filepath.Join(out, "nodeclaims.yaml"), []byte(b.String()))
	b.Reset()
	for _, p := range pods {
		p = p.DeepCopy()
		p.APIVersion, p.Kind = "v1", "Pod"
		disruptCleanMeta(&p.ObjectMeta)
		p.Status.Phase = corev1.PodRunning
		b.WriteString("---\n")
		b.Write(dumpYAML(t, p))
	}
	dumpWrite(t, filepath.Join(out, "pods.yaml"), []byte(b.String()))
	np := &v1.NodePool{}
	Expect(env.Client.Get(ctx, client.ObjectKey{Name: dumpNodePoolName}, np)).To(Succeed())
	np.APIVersion, np.Kind = "karpenter.sh/v1", "NodePool"
	disruptCleanMeta(&np.ObjectMeta)
	np.Status = v1.NodePoolStatus{}
	np.Spec.Template.Spec.NodeClassRef = &v1.NodeClassReference{Group: dumpNodeClassGroup, Kind: dumpNodeClassKind, Name: dumpNodeClassName}
	dumpWrite(t, filepath.Join(out, "nodepool.yaml"), dumpYAML(t, np))
	dumpWrite(t, filepath.Join(out, "catalog.json"), dumpJSON(t, dumpCatalog(cloudProvider.InstanceTypes)))
}

func disruptCleanMeta(m *metav1.ObjectMeta) {
	m.ManagedFields, m.ResourceVersion, m.Generation = nil, "", 0
	m.UID = types.UID("")
}

type disruptNopValidator struct{}

func (disruptNopValidator) Validate(_ context.Context, c disruption.Command, _ time.Duration) (disruption.Command, error) {
	return c, nil
}

type disruptReport struct {
	KarpenterVersion string                `json:"karpenter_version"`
	GoVersion        string                `json:"go_version"`
	Input            string                `json:"input"`
	Shape            string                `json:"shape"`
	SizeNodes        int                   `json:"size_nodes"`
	Nodes            int                   `json:"nodes"`
	PodsPacked       int                   `json:"pods_packed"`
	PodsPending      int                   `json:"pods_pending"`
	PodsRemoved      int                   `json:"pods_removed"`
	Pods             int                   `json:"pods"`
	PricePerHour     float64               `json:"price_per_hour"`
	ProvisionSeconds float64               `json:"provision_seconds"`
	PeakRSS          uint64                `json:"peak_rss_bytes"`
	Policies         []disruptPolicyResult `json:"policies"`
}

type disruptPolicyResult struct {
	Policy       string           `json:"policy"`
	Synced       bool             `json:"synced"`
	Method       string           `json:"method"`
	PassSeconds  float64          `json:"pass_seconds"`
	PeakRSS      uint64           `json:"peak_rss_bytes"`
	NodesRemoved int              `json:"nodes_removed"`
	NodesCreated int              `json:"nodes_created"`
	PodsMoved    int              `json:"pods_moved"`
	PriceAfter   float64          `json:"price_per_hour_after"`
	Savings      float64          `json:"savings_per_hour"`
	Commands     []disruptCommand `json:"commands"`
}

type disruptCommand struct {
	Decision     string               `json:"decision"`
	Reason       string               `json:"reason"`
	Candidates   []disruptCandidate   `json:"candidates"`
	Replacements []disruptReplacement `json:"replacements"`
	// Where the candidates' pods go: an existing node or a replacement's name.
	Moves []disruptMove `json:"moves"`
}

type disruptMove struct {
	Pod string `json:"pod"`
	To  string `json:"to"`
}

type disruptCandidate struct {
	Node         string  `json:"node"`
	NodeClaim    string  `json:"nodeclaim"`
	InstanceType string  `json:"instance_type"`
	Zone         string  `json:"zone"`
	CapacityType string  `json:"capacity_type"`
	Price        float64 `json:"price"`
	Pods         int     `json:"pods"`
}

type disruptReplacement struct {
	Name                string   `json:"name"`
	InstanceType        string   `json:"instance_type"`
	Zone                string   `json:"zone"`
	CapacityType        string   `json:"capacity_type"`
	Price               float64  `json:"price"`
	InstanceTypeOptions int      `json:"instance_type_options"`
	Pods                []string `json:"pods"`
}

// upstream-oracle answers questions about node selector requirements and NodeOverlays with upstream
// Karpenter core's own code, so that karpenter-azure's can be compared with it case by case
// (tests/oracle/requirements_oracle.rs and tests/oracle/overlay_oracle.rs).
//
//	upstream-oracle requirements < input.json   pkg/scheduling: Requirements, Has, HasIntersection, Compatible
//	upstream-oracle overlays < input.json       pkg/controllers/nodeoverlay: Controller.Reconcile, InstanceTypeStore.ApplyAll
//
// The input is {"wellKnown": [label keys], "cases": [...]}; the output is {"coreWellKnown": [label keys],
// "answers": [...]}, one answer per case in the input's order. wellKnown names the label keys a
// provider adds to v1.WellKnownLabels at start-up (the Azure provider does so in its apis package);
// coreWellKnown is core's own set, before that. Nothing here decides an answer: every case goes
// straight into upstream's functions and their results come straight out.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"sort"

	"github.com/awslabs/operatorpkg/status"
	"github.com/go-logr/logr"
	"gopkg.in/inf.v0"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	clock "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"sigs.k8s.io/karpenter/pkg/apis"
	v1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/apis/v1alpha1"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/controllers/nodeoverlay"
	"sigs.k8s.io/karpenter/pkg/controllers/state"
	"sigs.k8s.io/karpenter/pkg/scheduling"
)

type input struct {
	WellKnown []string        `json:"wellKnown"`
	Cases     json.RawMessage `json:"cases"`
}

type output struct {
	CoreWellKnown []string `json:"coreWellKnown"`
	Answers       any      `json:"answers"`
}

func main() {
	log.SetLogger(logr.Discard())
	if len(os.Args) != 2 {
		fail("usage: upstream-oracle requirements|overlays < input.json")
	}
	var in input
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		fail("reading the input: %v", err)
	}
	core := sets.List(v1.WellKnownLabels)
	v1.WellKnownLabels = v1.WellKnownLabels.Union(sets.New(in.WellKnown...))
	var answers any
	switch os.Args[1] {
	case "requirements":
		var cases []requirementsCase
		decode(in.Cases, &cases)
		list := make([]requirementsAnswer, 0, len(cases))
		for _, c := range cases {
			list = append(list, answerRequirements(c))
		}
		answers = list
	case "overlays":
		var cases []overlayCase
		decode(in.Cases, &cases)
		list := make([]overlayAnswer, 0, len(cases))
		for _, c := range cases {
			list = append(list, answerOverlays(c))
		}
		answers = list
	default:
		fail("unknown mode %q", os.Args[1])
	}
	if err := json.NewEncoder(os.Stdout).Encode(output{CoreWellKnown: core, Answers: answers}); err != nil {
		fail("writing the answers: %v", err)
	}
}

func decode(raw json.RawMessage, into any) {
	if err := json.Unmarshal(raw, into); err != nil {
		fail("reading the cases: %v", err)
	}
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "upstream-oracle: "+format+"\n", args...)
	os.Exit(1)
}

// ---------------------------------------------------------------------------------------------
// requirements
// ---------------------------------------------------------------------------------------------

// requirement is a v1.NodeSelectorRequirementWithMinValues as a NodePool, a NodeClaim or a pod
// (without minValues) states it.
type requirement struct {
	Key       string   `json:"key"`
	Operator  string   `json:"operator"`
	Values    []string `json:"values"`
	MinValues *int     `json:"minValues,omitempty"`
}

// requirementsCase: two requirement lists, each folded into one Requirements by upstream's
// constructor (several entries on one key intersect), and values to ask each requirement about.
type requirementsCase struct {
	Name   string        `json:"name"`
	A      []requirement `json:"a"`
	B      []requirement `json:"b"`
	Probes []string      `json:"probes"`
}

// keyAnswer is what upstream says about one key's requirement.
type keyAnswer struct {
	// Has(probe) for each probe, in the case's order.
	Has       []bool `json:"has"`
	Operator  string `json:"operator"`
	MinValues *int   `json:"minValues"`
	// String(), for reading a difference.
	String string `json:"string"`
}

type requirementsAnswer struct {
	Name string `json:"name"`
	// By key, as upstream stores it (aliases normalized).
	A    map[string]keyAnswer `json:"a"`
	B    map[string]keyAnswer `json:"b"`
	Both map[string]keyAnswer `json:"both"`
	// HasIntersection of A's and B's requirement, for each key both define.
	HasIntersection map[string]bool `json:"hasIntersection"`
	// A.Compatible(B) (A offers, B wants), and with AllowUndefinedWellKnownLabels; then B.Compatible(A).
	Compatible            bool `json:"compatible"`
	CompatibleWellKnown   bool `json:"compatibleWellKnown"`
	BCompatibleA          bool `json:"bCompatibleA"`
	BCompatibleAWellKnown bool `json:"bCompatibleAWellKnown"`
}

func requirements(list []requirement) scheduling.Requirements {
	out := scheduling.NewRequirements()
	for _, r := range list {
		// The constructor normalizes values in place: give it a copy.
		values := append([]string(nil), r.Values...)
		out.Add(scheduling.NewRequirementWithFlexibility(r.Key, corev1.NodeSelectorOperator(r.Operator), r.MinValues, values...))
	}
	return out
}

func describe(reqs scheduling.Requirements, probes []string) map[string]keyAnswer {
	out := map[string]keyAnswer{}
	for key, r := range reqs {
		has := make([]bool, len(probes))
		for i, p := range probes {
			has[i] = r.Has(p)
		}
		out[key] = keyAnswer{Has: has, Operator: string(r.Operator()), MinValues: r.MinValues, String: r.String()}
	}
	return out
}

func answerRequirements(c requirementsCase) requirementsAnswer {
	a, b := requirements(c.A), requirements(c.B)
	both := requirements(append(append([]requirement(nil), c.A...), c.B...))
	hasIntersection := map[string]bool{}
	for key, r := range a {
		if other, ok := b[key]; ok {
			hasIntersection[key] = r.HasIntersection(other)
		}
	}
	return requirementsAnswer{
		Name:                  c.Name,
		A:                     describe(a, c.Probes),
		B:                     describe(b, c.Probes),
		Both:                  describe(both, c.Probes),
		HasIntersection:       hasIntersection,
		Compatible:            a.Compatible(b) == nil,
		CompatibleWellKnown:   a.Compatible(b, scheduling.AllowUndefinedWellKnownLabels) == nil,
		BCompatibleA:          b.Compatible(a) == nil,
		BCompatibleAWellKnown: b.Compatible(a, scheduling.AllowUndefinedWellKnownLabels) == nil,
	}
}

// ---------------------------------------------------------------------------------------------
// overlays
// ---------------------------------------------------------------------------------------------

type offering struct {
	// The labels the offering adds to its type's (zone, capacity type, ...).
	Labels map[string]string `json:"labels"`
	Price  float64           `json:"price"`
}

type instanceType struct {
	Name     string            `json:"name"`
	Labels   map[string]string `json:"labels"`
	Capacity map[string]string `json:"capacity"`
	// Distinct by their labels, as upstream requires.
	Offerings []offering `json:"offerings"`
}

type pool struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels"`
	Types  []instanceType    `json:"types"`
}

type overlayCase struct {
	Name     string                 `json:"name"`
	Pools    []pool                 `json:"pools"`
	Overlays []v1alpha1.NodeOverlay `json:"overlays"`
}

type offeringAnswer struct {
	Price float64 `json:"price"`
	// The price's IEEE 754 bits, so the comparison is exact whatever the JSON reader's float parsing.
	PriceBits uint64 `json:"priceBits"`
	Overlaid  bool   `json:"overlaid"`
}

type typeAnswer struct {
	// In the input's order.
	Offerings []offeringAnswer `json:"offerings"`
	// Whole units, rounded down; cpu in millicores.
	Capacity         map[string]int64 `json:"capacity"`
	CapacityOverlaid bool             `json:"capacityOverlaid"`
}

type overlayAnswer struct {
	Name string `json:"name"`
	// Pool name -> type name -> the type after ApplyAll.
	Pools map[string]map[string]typeAnswer `json:"pools"`
	// Overlay name -> the reason of its ValidationSucceeded=False condition, for the overlays left out.
	Rejected map[string]string `json:"rejected"`
}

// karpenterScheme holds the two kinds the controller reads and writes, and nothing else: the fake
// client builds a REST mapper of its scheme for every patch, and client-go's whole scheme makes that
// the bulk of the time a case takes.
var karpenterScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	for gv, kinds := range map[schema.GroupVersion][]runtime.Object{
		{Group: apis.Group, Version: "v1"}:       {&v1.NodePool{}, &v1.NodePoolList{}},
		{Group: apis.Group, Version: "v1alpha1"}: {&v1alpha1.NodeOverlay{}, &v1alpha1.NodeOverlayList{}},
	} {
		metav1.AddToGroupVersion(s, gv)
		s.AddKnownTypes(gv, kinds...)
	}
	return s
}()

// build makes a pool's instance types as a provider does: the type's requirements are its labels,
// with each offering label's values over all offerings (zone In [...], capacity type In [...]); an
// offering's requirements are its own labels.
func build(p pool) []*cloudprovider.InstanceType {
	out := make([]*cloudprovider.InstanceType, 0, len(p.Types))
	for _, t := range p.Types {
		reqs := scheduling.NewLabelRequirements(t.Labels)
		offeringValues := map[string][]string{}
		offerings := make(cloudprovider.Offerings, 0, len(t.Offerings))
		for _, o := range t.Offerings {
			for k, v := range o.Labels {
				offeringValues[k] = append(offeringValues[k], v)
			}
			offerings = append(offerings, &cloudprovider.Offering{
				Requirements: scheduling.NewLabelRequirements(o.Labels),
				Price:        o.Price,
				Available:    true,
			})
		}
		keys := make([]string, 0, len(offeringValues))
		for k := range offeringValues {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			reqs.Add(scheduling.NewRequirement(k, corev1.NodeSelectorOpIn, offeringValues[k]...))
		}
		capacity := corev1.ResourceList{}
		for name, q := range t.Capacity {
			capacity[corev1.ResourceName(name)] = resource.MustParse(q)
		}
		out = append(out, &cloudprovider.InstanceType{
			Name:         t.Name,
			Requirements: reqs,
			Offerings:    offerings,
			Capacity:     capacity,
			Overhead:     &cloudprovider.InstanceTypeOverhead{},
		})
	}
	return out
}

// provider serves each case's instance types by NodePool; the overlay controller calls nothing else.
type provider struct {
	cloudprovider.CloudProvider
	pools map[string]pool
}

func (p provider) GetInstanceTypes(_ context.Context, np *v1.NodePool) ([]*cloudprovider.InstanceType, error) {
	return build(p.pools[np.Name]), nil
}

func (p provider) Name() string { return "upstream-oracle" }

func (p provider) GetSupportedNodeClasses() []status.Object { return nil }

func answerOverlays(c overlayCase) overlayAnswer {
	ctx := context.Background()
	objects := []client.Object{}
	pools := map[string]pool{}
	for _, p := range c.Pools {
		pools[p.Name] = p
		objects = append(objects, &v1.NodePool{
			ObjectMeta: metav1.ObjectMeta{Name: p.Name},
			Spec:       v1.NodePoolSpec{Template: v1.NodeClaimTemplate{ObjectMeta: v1.ObjectMeta{Labels: p.Labels}}},
		})
	}
	for i := range c.Overlays {
		objects = append(objects, c.Overlays[i].DeepCopy())
	}
	kube := fake.NewClientBuilder().
		WithScheme(karpenterScheme).
		WithStatusSubresource(&v1alpha1.NodeOverlay{}).
		WithObjects(objects...).
		Build()
	cp := provider{pools: pools}
	store := nodeoverlay.NewInstanceTypeStore()
	clk := clock.NewFakeClock(metav1.Now().Time)
	controller := nodeoverlay.NewController(clk, kube, cp, store, state.NewCluster(clk, kube, cp))
	if _, err := controller.Reconcile(ctx, reconcile.Request{}); err != nil {
		fail("%s: reconcile: %v", c.Name, err)
	}

	answer := overlayAnswer{Name: c.Name, Pools: map[string]map[string]typeAnswer{}, Rejected: map[string]string{}}
	list := &v1alpha1.NodeOverlayList{}
	if err := kube.List(ctx, list); err != nil {
		fail("%s: listing overlays: %v", c.Name, err)
	}
	for _, o := range list.Items {
		for _, cond := range o.Status.Conditions {
			if cond.Type == v1alpha1.ConditionTypeValidationSucceeded && cond.Status == metav1.ConditionFalse {
				answer.Rejected[o.Name] = cond.Reason
			}
		}
	}
	for _, p := range c.Pools {
		its, err := store.ApplyAll(p.Name, build(p))
		if err != nil {
			fail("%s: ApplyAll(%s): %v", c.Name, p.Name, err)
		}
		types := map[string]typeAnswer{}
		for _, it := range its {
			offerings := make([]offeringAnswer, 0, len(it.Offerings))
			for _, o := range it.Offerings {
				offerings = append(offerings, offeringAnswer{Price: o.Price, PriceBits: math.Float64bits(o.Price), Overlaid: o.IsPriceOverlaid()})
			}
			capacity := map[string]int64{}
			for name, q := range it.Capacity {
				if name == corev1.ResourceCPU {
					capacity[string(name)] = q.MilliValue()
				} else {
					// Whole units, rounded down: what pods, which request whole units, can have.
					capacity[string(name)] = new(inf.Dec).Round(q.AsDec(), 0, inf.RoundFloor).UnscaledBig().Int64()
				}
			}
			types[it.Name] = typeAnswer{Offerings: offerings, Capacity: capacity, CapacityOverlaid: it.IsCapacityOverlayApplied()}
		}
		answer.Pools[p.Name] = types
	}
	return answer
}

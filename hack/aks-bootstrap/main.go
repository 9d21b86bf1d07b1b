// aks-bootstrap renders node custom data with upstream's own generator, so that karpenter-azure's
// renderer can be compared with it variable by variable (tests/oracle/bootstrap_oracle.rs).
//
// It reads a JSON array of cases on stdin, calls bootstrap.AKS.Script() of the pinned
// github.com/Azure/karpenter-provider-azure (see go.mod) for each, decodes the base64 result and writes
// a JSON object {case name: decoded script} on stdout. Nothing here decides a value: every field of
// the case goes straight into upstream's input struct.
package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/Azure/karpenter-provider-azure/pkg/apis/v1alpha2"
	"github.com/Azure/karpenter-provider-azure/pkg/providers/imagefamily/bootstrap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

type taint struct {
	Key    string `json:"key"`
	Value  string `json:"value"`
	Effect string `json:"effect"`
}

type kubelet struct {
	MaxPods                     int32             `json:"maxPods"`
	KubeReserved                map[string]string `json:"kubeReserved"`
	SystemReserved              map[string]string `json:"systemReserved"`
	EvictionHard                map[string]string `json:"evictionHard"`
	CPUManagerPolicy            string            `json:"cpuManagerPolicy"`
	CPUCFSQuota                 *bool             `json:"cpuCFSQuota"`
	CPUCFSQuotaPeriod           string            `json:"cpuCFSQuotaPeriod"`
	ImageGCHighThresholdPercent *int32            `json:"imageGCHighThresholdPercent"`
	ImageGCLowThresholdPercent  *int32            `json:"imageGCLowThresholdPercent"`
	TopologyManagerPolicy       string            `json:"topologyManagerPolicy"`
	AllowedUnsafeSysctls        []string          `json:"allowedUnsafeSysctls"`
}

type input struct {
	Name                    string            `json:"name"`
	Arch                    string            `json:"arch"`
	TenantID                string            `json:"tenantID"`
	SubscriptionID          string            `json:"subscriptionID"`
	KubeletIdentityClientID string            `json:"kubeletIdentityClientID"`
	Location                string            `json:"location"`
	ResourceGroup           string            `json:"resourceGroup"`
	ClusterID               string            `json:"clusterID"`
	APIServerName           string            `json:"apiServerName"`
	BootstrapToken          string            `json:"bootstrapToken"`
	NetworkPlugin           string            `json:"networkPlugin"`
	NetworkPolicy           string            `json:"networkPolicy"`
	KubernetesVersion       string            `json:"kubernetesVersion"`
	ClusterName             string            `json:"clusterName"`
	ClusterEndpoint         string            `json:"clusterEndpoint"`
	CABundle                string            `json:"caBundle"`
	Labels                  map[string]string `json:"labels"`
	Taints                  []taint           `json:"taints"`
	GPUNode                 bool              `json:"gpuNode"`
	GPUDriverVersion        string            `json:"gpuDriverVersion"`
	GPUImageSHA             string            `json:"gpuImageSHA"`
	SubnetID                string            `json:"subnetID"`
	Kubelet                 kubelet           `json:"kubelet"`
}

func main() {
	var cases []input
	if err := json.NewDecoder(os.Stdin).Decode(&cases); err != nil {
		fail("reading the cases from stdin: %v", err)
	}
	out := map[string]string{}
	for _, c := range cases {
		script, err := render(c)
		if err != nil {
			fail("case %s: %v", c.Name, err)
		}
		out[c.Name] = script
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		fail("writing the result: %v", err)
	}
}

func render(c input) (string, error) {
	period := metav1.Duration{}
	if c.Kubelet.CPUCFSQuotaPeriod != "" {
		d, err := time.ParseDuration(c.Kubelet.CPUCFSQuotaPeriod)
		if err != nil {
			return "", fmt.Errorf("kubelet.cpuCFSQuotaPeriod: %w", err)
		}
		period.Duration = d
	}
	taints := make([]corev1.Taint, 0, len(c.Taints))
	for _, t := range c.Taints {
		taints = append(taints, corev1.Taint{Key: t.Key, Value: t.Value, Effect: corev1.TaintEffect(t.Effect)})
	}
	caBundle := c.CABundle
	aks := bootstrap.AKS{
		Options: bootstrap.Options{
			ClusterName:     c.ClusterName,
			ClusterEndpoint: c.ClusterEndpoint,
			KubeletConfig: &bootstrap.KubeletConfiguration{
				KubeletConfiguration: v1alpha2.KubeletConfiguration{
					CPUManagerPolicy:            c.Kubelet.CPUManagerPolicy,
					CPUCFSQuota:                 c.Kubelet.CPUCFSQuota,
					CPUCFSQuotaPeriod:           period,
					ImageGCHighThresholdPercent: c.Kubelet.ImageGCHighThresholdPercent,
					ImageGCLowThresholdPercent:  c.Kubelet.ImageGCLowThresholdPercent,
					TopologyManagerPolicy:       c.Kubelet.TopologyManagerPolicy,
					AllowedUnsafeSysctls:        c.Kubelet.AllowedUnsafeSysctls,
				},
				MaxPods:        c.Kubelet.MaxPods,
				KubeReserved:   c.Kubelet.KubeReserved,
				SystemReserved: c.Kubelet.SystemReserved,
				EvictionHard:   c.Kubelet.EvictionHard,
			},
			Taints:           taints,
			Labels:           c.Labels,
			CABundle:         &caBundle,
			GPUNode:          c.GPUNode,
			GPUDriverVersion: c.GPUDriverVersion,
			GPUImageSHA:      c.GPUImageSHA,
			SubnetID:         c.SubnetID,
		},
		Arch:                           c.Arch,
		TenantID:                       c.TenantID,
		SubscriptionID:                 c.SubscriptionID,
		KubeletIdentityClientID:        c.KubeletIdentityClientID,
		Location:                       c.Location,
		ResourceGroup:                  c.ResourceGroup,
		ClusterID:                      c.ClusterID,
		APIServerName:                  c.APIServerName,
		KubeletClientTLSBootstrapToken: c.BootstrapToken,
		NetworkPlugin:                  c.NetworkPlugin,
		NetworkPolicy:                  c.NetworkPolicy,
		KubernetesVersion:              c.KubernetesVersion,
	}
	encoded, err := aks.Script()
	if err != nil {
		return "", err
	}
	decoded, err := base64.StdEncoding.DecodeString(encoded)
	if err != nil {
		return "", fmt.Errorf("decoding upstream's custom data: %w", err)
	}
	return string(decoded), nil
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "aks-bootstrap: "+format+"\n", args...)
	os.Exit(1)
}

#!/bin/bash
# Rendered by karpenter-azure: joins this VM to the cluster as a node.
set -o errexit -o nounset -o pipefail
export API_SERVER_URL='https://cluster-dns-abc.hcp.eastus.azmk8s.io:443'
export TLS_BOOTSTRAP_TOKEN='abcdef.0123456789abcdef'
export NETWORK_PLUGIN='none'
export KUBELET_FLAGS='--max-pods=250 --node-labels=karpenter.sh/capacity-type=spot,karpenter.sh/nodepool=default --register-with-taints=dedicated=gpu:NoSchedule,karpenter.sh/unregistered:NoExecute --eviction-hard=memory.available<750Mi --kube-reserved=cpu=140m,memory=2662Mi --cpu-manager-policy=static'
# The node image ships the provisioning script; it may still be unpacking on first boot.
for _ in $(seq 1 120); do
  [ -x /opt/azure/containers/provision.sh ] && break
  sleep 1
done
exec /opt/azure/containers/provision.sh

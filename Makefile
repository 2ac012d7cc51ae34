.PHONY: k8s

# Build the local control plane binaries (etcd, kube-apiserver, kube-controller-manager,
# kubectl) into ~/.cache/goalkeeper/k8s-v1.37.2 if they are missing.
k8s:
	scripts/build-k8s.sh

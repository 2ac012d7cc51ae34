// Command etcd is what etcd's own main does, at the version Kubernetes requires.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}

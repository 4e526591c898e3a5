//go:build tools

// Package conformance pins the judges' binaries to this module's versions: e2e.test is built
// from k8s.io/kubernetes/test/e2e, the ginkgo CLI from the ginkgo library that suite links, and
// agnhost and nnp (programs of the suite's test images) from the same kubernetes module.
package conformance

import (
	_ "github.com/onsi/ginkgo/v2/ginkgo"
	_ "k8s.io/kubernetes/test/e2e"
	_ "k8s.io/kubernetes/test/images/agnhost"
	_ "k8s.io/kubernetes/test/images/nonewprivs"
)

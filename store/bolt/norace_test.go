//go:build !race

package bolt

const raceBuild = false

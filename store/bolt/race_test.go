//go:build race

package bolt

// raceBuild: the race detector slows the power-cut tests about tenfold, so
// they run fewer cuts under it (CI runs the full count without it).
const raceBuild = true

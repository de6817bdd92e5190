//go:build race

package limits

// raceBuild: the proxy under test is built with -race too (testenv), whose
// memory use is several times the plain binary's.
const raceBuild = true

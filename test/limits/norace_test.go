//go:build !race

package limits

const raceBuild = false

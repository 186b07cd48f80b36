// Package web holds the built admin console for the control plane to embed.
//
// dist/ is what `npm run build` (make web) writes. Only dist/.gitkeep is committed: it lets this
// package compile on a fresh clone before the first npm build (go:embed needs a file to match),
// and the build script puts it back after vite empties dist/. A binary built without the npm
// build serves a page that says so (controlplane/internal/webui).
package web

import (
	"embed"
	"io/fs"
)

//go:embed all:dist
var dist embed.FS

// Dist is the built console: the contents of web/dist.
func Dist() fs.FS {
	sub, err := fs.Sub(dist, "dist")
	if err != nil { // cannot happen: "dist" is a valid path embedded above
		panic(err)
	}
	return sub
}

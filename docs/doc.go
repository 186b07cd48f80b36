// Package docs holds the repository's documentation (the Markdown files beside this one). It has
// no code; its test (`go test ./docs`, run by `make lint`) checks that the documentation and the
// citations in the code agree:
//
//   - every `Req N`, `Req N.M` and `Property N` cited in code or docs has an entry in
//     requirements.md, and every test that file names exists;
//   - every `docs/design.md §N` citation names a section of design.md;
//   - nothing refers to files outside the repository (the design notes and specification the
//     project started from are not part of it);
//   - README.md has at most 250 lines;
//   - every relative link of README.md and docs/*.md reaches an existing file (and heading).
package docs

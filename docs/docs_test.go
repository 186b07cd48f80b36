package docs

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// root is the repository, seen from this package's directory.
const root = ".."

// maxReadmeLines is the README's budget: the front door, the reference lives in docs/.
const maxReadmeLines = 250

// thisFile holds the patterns below, so it is the one file the forbidden-reference check skips.
const thisFile = "docs/docs_test.go"

// skipDirs are never scanned: generated, installed or run-time content.
var skipDirs = map[string]bool{".git": true, "node_modules": true, "dist": true, "bin": true,
	".run": true, "rapid": true, "artifacts": true}

// scanned are the extensions of the files whose text is checked.
var scanned = map[string]bool{".go": true, ".lua": true, ".ts": true, ".vue": true, ".md": true,
	".yaml": true, ".yml": true, ".conf": true, ".tmpl": true, ".sh": true, ".js": true,
	".json": true, ".txt": true, ".golden": true, ".html": true, ".css": true, ".service": true}

type file struct {
	path string // slash-separated, relative to the repository
	text string
}

// repoFiles reads every scanned file of the repository.
func repoFiles(t *testing.T) []file {
	t.Helper()
	var out []file
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel != "." && (skipDirs[d.Name()] || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		if !scanned[filepath.Ext(p)] && d.Name() != "Makefile" && d.Name() != "Dockerfile" {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		out = append(out, file{rel, string(b)})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < 100 {
		t.Fatalf("only %d files found under %s: is this the repository?", len(out), root)
	}
	return out
}

func readDoc(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(name)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// lineOf is the 1-based line of byte offset i in s.
func lineOf(s string, i int) int { return strings.Count(s[:i], "\n") + 1 }

var (
	// a requirement citation: "Req 1", "Req 2.5", "Req 2, 13", "Req 17-19", "Req 20.6-7",
	// "Req 16.2-16.5", "Req 10.8, 16.7", "Requirements 5.2 and 5.3"
	reqCite = regexp.MustCompile(`\bReq(?:uirements?)?\.? (\d+(?:\.\d+)?(?:(?: ?[-–] ?|, | and | or )\d+(?:\.\d+)?)*)`)
	// a property citation: "Property 7", "Properties 2, 8, 10, 12", "Properties 3, 4 and 11"
	propCite = regexp.MustCompile(`\bPropert(?:y|ies) (\d+(?:(?: ?[-–] ?|, | and | or )\d+)*)`)
	// a design citation: "docs/design.md §5" (or "design.md §5" inside docs/)
	designCite = regexp.MustCompile(`design\.md ?§ ?(\d+)`)
	listSep    = regexp.MustCompile(`, | and | or `)
	rangeSep   = regexp.MustCompile(` ?[-–] ?`)
)

// expand turns the list of a citation into its items: ranges become every item in them.
func expand(list string) ([]string, error) {
	var out []string
	for _, part := range listSep.Split(list, -1) {
		ends := rangeSep.Split(part, -1)
		if len(ends) == 1 {
			out = append(out, part)
			continue
		}
		if len(ends) != 2 {
			return nil, fmt.Errorf("range %q", part)
		}
		a, b := ends[0], ends[1]
		major, minor, dotted := strings.Cut(a, ".")
		if dotted {
			// 20.6-7 or 16.2-16.5: criteria of one requirement
			bmaj, bmin, bdotted := strings.Cut(b, ".")
			if !bdotted {
				bmaj, bmin = major, b
			}
			if bmaj != major {
				return nil, fmt.Errorf("range %q spans requirements", part)
			}
			lo, _ := strconv.Atoi(minor)
			hi, _ := strconv.Atoi(bmin)
			if hi < lo || hi-lo > 50 {
				return nil, fmt.Errorf("range %q", part)
			}
			for i := lo; i <= hi; i++ {
				out = append(out, major+"."+strconv.Itoa(i))
			}
			continue
		}
		if strings.Contains(b, ".") {
			return nil, fmt.Errorf("range %q", part)
		}
		lo, _ := strconv.Atoi(a)
		hi, _ := strconv.Atoi(b)
		if hi < lo || hi-lo > 50 {
			return nil, fmt.Errorf("range %q", part)
		}
		for i := lo; i <= hi; i++ {
			out = append(out, strconv.Itoa(i))
		}
	}
	return out, nil
}

// entries of requirements.md: "Req 16", "Req 16.2", "Property 11".
func requirementEntries(t *testing.T) map[string]bool {
	t.Helper()
	doc := readDoc(t, "docs/requirements.md")
	have := map[string]bool{}
	heading := regexp.MustCompile(`(?m)^## (Req|Property) (\d+): \S`)
	for _, m := range heading.FindAllStringSubmatch(doc, -1) {
		have[m[1]+" "+m[2]] = true
	}
	row := regexp.MustCompile(`(?m)^\| Req (\d+)\.(\d+) \| \S`)
	for _, m := range row.FindAllStringSubmatch(doc, -1) {
		if !have["Req "+m[1]] {
			t.Errorf("requirements.md: row Req %s.%s outside a \"## Req %s: …\" section", m[1], m[2], m[1])
		}
		have["Req "+m[1]+"."+m[2]] = true
	}
	if len(have) < 40 {
		t.Fatalf("requirements.md: only %d entries found", len(have))
	}
	return have
}

// designSections of design.md: "## 5. Request flow" -> 5.
func designSections(t *testing.T) map[string]bool {
	t.Helper()
	have := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^## (\d+)\. \S`).FindAllStringSubmatch(readDoc(t, "docs/design.md"), -1) {
		have[m[1]] = true
	}
	if len(have) < 10 {
		t.Fatalf("design.md: only %d numbered sections", len(have))
	}
	return have
}

// TestCitationsResolve: every requirement, property and design section cited anywhere in the
// repository has its entry in docs/requirements.md or its section in docs/design.md.
func TestCitationsResolve(t *testing.T) {
	reqs := requirementEntries(t)
	sections := designSections(t)
	cited := 0
	for _, f := range repoFiles(t) {
		if f.path == thisFile {
			continue
		}
		check := func(re *regexp.Regexp, kind string, known map[string]bool) {
			for _, m := range re.FindAllStringSubmatchIndex(f.text, -1) {
				list := f.text[m[2]:m[3]]
				items, err := expand(list)
				if err != nil {
					t.Errorf("%s:%d: %s %s: %v", f.path, lineOf(f.text, m[0]), kind, list, err)
					continue
				}
				for _, it := range items {
					cited++
					if !known[kind+" "+it] {
						t.Errorf("%s:%d: %s %s has no entry in docs/requirements.md", f.path,
							lineOf(f.text, m[0]), kind, it)
					}
				}
			}
		}
		check(reqCite, "Req", reqs)
		check(propCite, "Property", reqs)
		for _, m := range designCite.FindAllStringSubmatchIndex(f.text, -1) {
			cited++
			if n := f.text[m[2]:m[3]]; !sections[n] {
				t.Errorf("%s:%d: docs/design.md has no section %s", f.path, lineOf(f.text, m[0]), n)
			}
		}
	}
	if cited < 50 {
		t.Errorf("only %d citations found: is the scan reading the code?", cited)
	}
}

// TestRequirementTestsExist: every test docs/requirements.md names exists, and every file it
// names is in the repository.
func TestRequirementTestsExist(t *testing.T) {
	doc := readDoc(t, "docs/requirements.md")
	funcs := map[string]bool{}
	decl := regexp.MustCompile(`(?m)^func ((?:Test|Fuzz)\w+)\(`)
	for _, f := range repoFiles(t) {
		if strings.HasSuffix(f.path, "_test.go") {
			for _, m := range decl.FindAllStringSubmatch(f.text, -1) {
				funcs[m[1]] = true
			}
		}
	}
	named := 0
	for _, m := range regexp.MustCompile("`((?:Test|Fuzz)[A-Z0-9]\\w*)`").FindAllStringSubmatchIndex(doc, -1) {
		named++
		if name := doc[m[2]:m[3]]; !funcs[name] {
			t.Errorf("docs/requirements.md:%d: no test %s in the repository", lineOf(doc, m[0]), name)
		}
	}
	if named < 50 {
		t.Errorf("only %d tests named in docs/requirements.md", named)
	}
	for _, m := range regexp.MustCompile("`((?:[\\w.-]+/)+[\\w.-]+\\.(?:go|lua|ts|conf|yml|yaml|md))`").FindAllStringSubmatchIndex(doc, -1) {
		p := doc[m[2]:m[3]]
		if strings.ContainsAny(p, "*") {
			continue
		}
		if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(p))); err != nil {
			t.Errorf("docs/requirements.md:%d: %s is not in the repository", lineOf(doc, m[0]), p)
		}
	}
}

// forbidden are references to what a clone of the repository does not have: the directory of
// notes the project started from, its design notes and its seed documents.
var forbidden = []struct {
	re   *regexp.Regexp
	what string
}{
	{regexp.MustCompile(`\.\./shared\b`), "a link outside the repository (../shared)"},
	{regexp.MustCompile(`/work/shared\b`), "a path outside the repository (/work/shared)"},
	{regexp.MustCompile(`\bDESIGN\b`), "the old design notes (cite docs/design.md §N)"},
	{regexp.MustCompile(`\bSTYLE\.md\b`), "the old style notes"},
	{regexp.MustCompile(`(?i)\bseeds? ?00\d\b|\bseeds/|\b00\d_[0-9a-f]{16}\.txt\b`), "a seed document (cite docs/requirements.md or docs/design.md)"},
}

// TestNothingRefersOutsideTheRepository: no file links or cites the notes and specification the
// project started from; what they said lives in docs/.
func TestNothingRefersOutsideTheRepository(t *testing.T) {
	for _, f := range repoFiles(t) {
		if f.path == thisFile {
			continue
		}
		for _, fb := range forbidden {
			for _, loc := range fb.re.FindAllStringIndex(f.text, -1) {
				t.Errorf("%s:%d: %q is %s", f.path, lineOf(f.text, loc[0]), f.text[loc[0]:loc[1]], fb.what)
			}
		}
	}
}

// TestReadmeIsShort: the README is the front door; the reference lives in docs/.
func TestReadmeIsShort(t *testing.T) {
	readme := readDoc(t, "README.md")
	if n := strings.Count(readme, "\n"); n > maxReadmeLines {
		t.Errorf("README.md has %d lines, at most %d: move reference material to docs/", n, maxReadmeLines)
	}
}

var (
	mdLink     = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?: "[^"]*")?\)`)
	mdHeading  = regexp.MustCompile(`(?m)^#{1,6} (.+?)\s*#*\s*$`)
	codeFence  = regexp.MustCompile("(?ms)^```.*?^```")
	inlineCode = regexp.MustCompile("`[^`\n]*`")
)

// slug is GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors of a Markdown file (headings outside code fences; repeated ones get -1, -2, …).
func anchors(text string) map[string]bool {
	text = codeFence.ReplaceAllString(text, "")
	out := map[string]bool{}
	for _, m := range mdHeading.FindAllStringSubmatch(text, -1) {
		s := slug(strings.ReplaceAll(m[1], "`", ""))
		for i := 0; ; i++ {
			k := s
			if i > 0 {
				k = s + "-" + strconv.Itoa(i)
			}
			if !out[k] {
				out[k] = true
				break
			}
		}
	}
	return out
}

// TestRelativeLinksResolve: every relative link of README.md and docs/*.md reaches a file of the
// repository, and its #anchor a heading of that file.
func TestRelativeLinksResolve(t *testing.T) {
	pages := []string{"README.md"}
	ents, err := os.ReadDir(filepath.Join(root, "docs"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".md") {
			pages = append(pages, "docs/"+e.Name())
		}
	}
	sort.Strings(pages)
	var missing []string
	for _, page := range pages {
		text := readDoc(t, page)
		body := inlineCode.ReplaceAllString(codeFence.ReplaceAllStringFunc(text, blank), "")
		for _, m := range mdLink.FindAllStringSubmatchIndex(body, -1) {
			target := body[m[2]:m[3]]
			line := lineOf(body, m[0])
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			dest := page
			if path != "" {
				dest = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(page), path)))
				if dest == ".." || strings.HasPrefix(dest, "../") || filepath.IsAbs(path) {
					t.Errorf("%s:%d: %s leaves the repository", page, line, target)
					continue
				}
				st, err := os.Stat(filepath.Join(root, filepath.FromSlash(dest)))
				if err != nil {
					t.Errorf("%s:%d: %s: no file %s", page, line, target, dest)
					missing = append(missing, dest)
					continue
				}
				if st.IsDir() || anchor == "" || !strings.HasSuffix(dest, ".md") {
					continue
				}
			}
			if anchor != "" && !anchors(readDoc(t, dest))[anchor] {
				t.Errorf("%s:%d: %s: %s has no heading #%s", page, line, target, dest, anchor)
			}
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		t.Logf("link targets missing: %s", strings.Join(uniq(missing), ", "))
	}
}

// blank replaces a code fence by as many empty lines, so line numbers stay right.
func blank(s string) string { return strings.Repeat("\n", strings.Count(s, "\n")) }

func uniq(s []string) []string {
	var out []string
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// TestCitationParsing: the citation forms the code uses expand to the entries they mean.
func TestCitationParsing(t *testing.T) {
	cases := map[string]string{
		"(Req 1, docs/design.md §2)":  "Req 1",
		"(Req 2, 13; Properties 2)":   "Req 2,Req 13,Property 2",
		"Req 17-19, DESIGN":           "Req 17,Req 18,Req 19",
		"Req 20.6-7)":                 "Req 20.6,Req 20.7",
		"(Req 16.2-16.5)":             "Req 16.2,Req 16.3,Req 16.4,Req 16.5",
		"(Req 10.8, 16.7)":            "Req 10.8,Req 16.7",
		"Properties 3, 4 and 11 with": "Property 3,Property 4,Property 11",
		"Properties 15–17.":           "Property 15,Property 16,Property 17",
		"Requirements 5.2 and 5.3":    "Req 5.2,Req 5.3",
	}
	for in, want := range cases {
		var got []string
		for _, c := range []struct {
			re   *regexp.Regexp
			kind string
		}{{reqCite, "Req"}, {propCite, "Property"}} {
			for _, m := range c.re.FindAllStringSubmatch(in, -1) {
				items, err := expand(m[1])
				if err != nil {
					t.Errorf("%q: %v", in, err)
				}
				for _, it := range items {
					got = append(got, c.kind+" "+it)
				}
			}
		}
		if strings.Join(got, ",") != want {
			t.Errorf("%q: got %v, want %s", in, got, want)
		}
	}
}

// issueNumber is a tracker issue or task cited by number: the word, an optional #, digits.
var issueNumber = regexp.MustCompile(`(?i)\b(issue|task) #?[0-9]+`)

// TestProductDocsCiteNoIssueNumbers: the docs describe the product as it is; which issue changed
// what is git's history, not a reader's concern.
func TestProductDocsCiteNoIssueNumbers(t *testing.T) {
	for _, f := range repoFiles(t) {
		if f.path != "README.md" && !strings.HasPrefix(f.path, "docs/") || !strings.HasSuffix(f.path, ".md") {
			continue
		}
		for _, loc := range issueNumber.FindAllStringIndex(f.text, -1) {
			t.Errorf("%s:%d: %q cites an issue number", f.path, lineOf(f.text, loc[0]), f.text[loc[0]:loc[1]])
		}
	}
}

// mapRow is a row of design.md's module map: | `tollgate.a.b` | ... |
var mapRow = regexp.MustCompile("(?m)^\\| `(tollgate(?:\\.[A-Za-z0-9_]+)*)` \\|")

// TestModuleMapMatchesTheTree: design.md's module map lists every Lua module of lua/tollgate/,
// and only those.
func TestModuleMapMatchesTheTree(t *testing.T) {
	design := readDoc(t, "docs/design.md")
	start := strings.Index(design, "\n### Module map\n")
	if start < 0 {
		t.Fatal("docs/design.md has no \"### Module map\" section")
	}
	section := design[start+1:]
	if end := strings.Index(section, "\n#"); end >= 0 {
		section = section[:end]
	}
	listed := map[string]bool{}
	for _, m := range mapRow.FindAllStringSubmatch(section, -1) {
		if listed[m[1]] {
			t.Errorf("design.md's module map lists %s twice", m[1])
		}
		listed[m[1]] = true
	}
	tree := map[string]bool{}
	err := filepath.WalkDir(filepath.Join(root, "lua", "tollgate"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".lua") {
			return err
		}
		rel, _ := filepath.Rel(filepath.Join(root, "lua"), p)
		tree[strings.ReplaceAll(strings.TrimSuffix(filepath.ToSlash(rel), ".lua"), "/", ".")] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(tree) == 0 {
		t.Fatal("no Lua module under lua/tollgate")
	}
	for m := range tree {
		if !listed[m] {
			t.Errorf("%s (lua/%s.lua) is missing from docs/design.md's module map", m, strings.ReplaceAll(m, ".", "/"))
		}
	}
	for m := range listed {
		if !tree[m] {
			t.Errorf("docs/design.md's module map lists %s, which is not in lua/tollgate", m)
		}
	}
}

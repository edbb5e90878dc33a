package httpbreaker_test

// This file checks the Go blocks of README.md and docs/*.md, and the code
// blocks of the package doc (doc.go), so that what a reader pastes builds.
//
// Every ```go block is one of these, chosen by the HTML comment on the
// line (or lines) just above its fence:
//
//   - a whole file (it starts with a package clause): built as it is, in
//     a package of its own, in a temporary module that requires this one
//     through a replace directive;
//   - <!-- fragment --> or <!-- fragment: tr *httpbreaker.Transport; next http.RoundTripper -->:
//     a piece of code on purpose. Declarations (func, type, var, const)
//     go at the top level of a file; statements go inside a function
//     returning error, so that `return err` works. The names after
//     "fragment:" are declared for it as package-level variables. Imports
//     are added for the packages it names (see snippetImports);
//   - <!-- example: ExampleWithPolicy --> or <!-- example: redisstore/ExampleNew -->:
//     an excerpt of that Example function's body in the root (or that
//     directory's) *_test.go files, which go test compiles and runs;
//   - <!-- from: examples/fallback/storefront.go -->: an excerpt of that
//     file, which its own module's tests compile.
//
// An excerpt matches when its non-blank lines, with leading and trailing
// white space trimmed, appear one after another in the source; a line
// that is only "// ..." (or "// …", "...", "…") in the block stands for
// any number of lines left out. Any fenced block (```text, say) after
// <!-- output: ExampleWithPolicy --> must be that Example's // Output:
// exactly, so that a printed result cannot drift either. Each code block
// of the package doc (doc.go) must be an excerpt of a Go block of
// README.md.
//
// All wrapped blocks are vetted by one `go vet ./...` in the temporary
// module, offline (GOPROXY=off: the module cache holds what the root
// module needs). A block that builds on a package outside this module's
// requirements (an SDK, redisstore) cannot be built there: make it an
// excerpt of the example that builds it, with <!-- from: ... --> or
// <!-- example: ... -->.

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/doc"
	"go/doc/comment"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDocSnippets builds or matches every Go block of README.md and
// docs/*.md, checks every <!-- output: --> block against its Example, and
// every code block of doc.go against README.md.
func TestDocSnippets(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every Go block of README.md and docs/*.md in a temporary module (one go vet); skipped under -short")
	}
	root, err := filepath.Abs(".")
	require.NoError(t, err)
	docs, err := filepath.Glob("docs/*.md")
	require.NoError(t, err)
	files := append([]string{"README.md"}, docs...)

	var blocks []mdBlock
	for _, f := range files {
		bs, err := readBlocks(f)
		require.NoError(t, err)
		blocks = append(blocks, bs...)
	}
	examples := map[string]map[string]exampleSource{} // dir → name → source

	mod := t.TempDir()
	var built []builtBlock
	for _, b := range blocks {
		switch {
		case b.marker("output") != "":
			ex := lookupExample(t, examples, b.marker("output"))
			if ex == nil {
				t.Errorf("%s: <!-- output: %s -->: no such Example with an // Output:", b.pos(), b.marker("output"))
			} else if got, want := trimLines(b.code), trimLines(ex.output); got != want {
				t.Errorf("%s: the block differs from %s's // Output:\n--- block\n%s\n--- Output\n%s", b.pos(), b.marker("output"), got, want)
			}
		case b.info != "go":
			// Shell, JSON, PromQL, text: not Go.
		case b.marker("example") != "":
			ex := lookupExample(t, examples, b.marker("example"))
			if ex == nil {
				t.Errorf("%s: <!-- example: %s -->: no such Example function", b.pos(), b.marker("example"))
			} else if err := excerptOf(b.code, ex.body); err != nil {
				t.Errorf("%s: not an excerpt of %s: %v", b.pos(), b.marker("example"), err)
			}
		case b.marker("from") != "":
			src, err := os.ReadFile(filepath.FromSlash(b.marker("from")))
			if err != nil {
				t.Errorf("%s: <!-- from: %s -->: %v", b.pos(), b.marker("from"), err)
			} else if err := excerptOf(b.code, string(src)); err != nil {
				t.Errorf("%s: not an excerpt of %s: %v", b.pos(), b.marker("from"), err)
			}
		case isWholeFile(b.code):
			built = append(built, builtBlock{mdBlock: b, src: b.code, first: 1})
		case b.hasMarker("fragment"):
			src, first, err := wrapFragment(b.code, b.marker("fragment"))
			if err != nil {
				t.Errorf("%s: fragment: %v", b.pos(), err)
				continue
			}
			built = append(built, builtBlock{mdBlock: b, src: src, first: first})
		default:
			t.Errorf("%s: a Go block must be a whole file (a package clause first) or be marked, on the line above its fence, "+
				"<!-- fragment -->, <!-- example: ExampleName --> or <!-- from: path/file.go -->", b.pos())
		}
	}
	require.NotEmpty(t, built, "no Go block to build")

	checkPackageDoc(t, blocks)
	vetBlocks(t, root, mod, built)
}

// mdBlock is one fenced code block of a Markdown file.
type mdBlock struct {
	file    string
	line    int      // of the block's first line of code
	info    string   // the fence's info string: "go", "sh", ...
	code    string   // the lines between the fences
	markers []string // the HTML comments just above the fence, without <!-- -->
}

func (b mdBlock) pos() string { return fmt.Sprintf("%s:%d", b.file, b.line) }

// hasMarker reports whether a comment above the fence is name, alone or
// followed by ": ...".
func (b mdBlock) hasMarker(name string) bool {
	for _, m := range b.markers {
		if m == name || strings.HasPrefix(m, name+":") {
			return true
		}
	}
	return false
}

// marker returns what follows "name:" in a comment above the fence.
func (b mdBlock) marker(name string) string {
	for _, m := range b.markers {
		if v, ok := strings.CutPrefix(m, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

var fenceRE = regexp.MustCompile("^(```+|~~~+)\\s*([^`\\s]*)")

// readBlocks returns the fenced blocks of a Markdown file, each with the
// one-line HTML comments directly above its fence.
func readBlocks(file string) ([]mdBlock, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var (
		blocks  []mdBlock
		lines   = strings.Split(string(data), "\n")
		pending []string // comments seen since the last other line
	)
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		if c, ok := strings.CutPrefix(line, "<!--"); ok && strings.HasSuffix(c, "-->") {
			pending = append(pending, strings.TrimSpace(strings.TrimSuffix(c, "-->")))
			continue
		}
		m := fenceRE.FindStringSubmatch(line)
		if m == nil {
			if line != "" {
				pending = nil
			}
			continue
		}
		b := mdBlock{file: file, line: i + 2, info: m[2], markers: pending}
		pending = nil
		var code []string
		for i++; i < len(lines) && !strings.HasPrefix(strings.TrimSpace(lines[i]), m[1]); i++ {
			code = append(code, lines[i])
		}
		if i == len(lines) {
			return nil, fmt.Errorf("%s:%d: the fence is never closed", file, b.line-1)
		}
		b.code = dedent(code)
		blocks = append(blocks, b)
	}
	return blocks, nil
}

// dedent removes the indentation every non-blank line shares (a block
// inside a list item is indented).
func dedent(lines []string) string {
	prefix := ""
	first := true
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		ind := l[:len(l)-len(strings.TrimLeft(l, " \t"))]
		if first {
			prefix, first = ind, false
			continue
		}
		for !strings.HasPrefix(l, prefix) {
			prefix = prefix[:len(prefix)-1]
		}
	}
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = strings.TrimPrefix(l, prefix)
	}
	return strings.Join(out, "\n") + "\n"
}

// isWholeFile reports whether code starts, after comments, with a
// package clause.
func isWholeFile(code string) bool {
	f, err := parser.ParseFile(token.NewFileSet(), "", code, parser.PackageClauseOnly)
	return err == nil && f.Name != nil
}

// snippetImports are the packages a fragment may name without importing
// them: the import is added when the fragment names the package.
var snippetImports = map[string]string{
	"httpbreaker": "github.com/httpbreaker/httpbreaker",
	"prometheus":  "github.com/prometheus/client_golang/prometheus",
	"promhttp":    "github.com/prometheus/client_golang/prometheus/promhttp",
	"cleanhttp":   "github.com/hashicorp/go-cleanhttp",
	"context":     "context",
	"errors":      "errors",
	"fmt":         "fmt",
	"http":        "net/http",
	"httptest":    "net/http/httptest",
	"io":          "io",
	"json":        "encoding/json",
	"log":         "log",
	"math":        "math",
	"net":         "net",
	"os":          "os",
	"signal":      "os/signal",
	"slices":      "slices",
	"slog":        "log/slog",
	"strconv":     "strconv",
	"strings":     "strings",
	"sync":        "sync",
	"syscall":     "syscall",
	"time":        "time",
	"url":         "net/url",
}

// wrapFragment makes a file of a fragment: givens ("a T; b U") as
// package-level variables, then the fragment's declarations, or its
// statements inside a function. It returns the file and the line of it
// on which the fragment's first line stands.
func wrapFragment(code, givens string) (string, int, error) {
	var head strings.Builder
	head.WriteString("package snippet\n\n")
	for g := range strings.SplitSeq(givens, ";") {
		if g = strings.TrimSpace(g); g != "" {
			fmt.Fprintf(&head, "var %s\n", g)
		}
	}
	decls := false
	if _, err := parser.ParseFile(token.NewFileSet(), "", "package snippet\n"+code, 0); err == nil {
		decls = true
	}
	body, pre := code, ""
	if !decls {
		pre = "func _() error {\n\tif true {\n"
		body = code + "\t}\n\treturn nil\n}\n"
	}
	src := head.String() + pre + body
	// Find the packages it names and that nothing in it declares.
	f, err := parser.ParseFile(token.NewFileSet(), "", src, parser.ImportsOnly|parser.ParseComments)
	if err != nil {
		return "", 0, err
	}
	full, err := parser.ParseFile(token.NewFileSet(), "", src, 0)
	if err != nil {
		return "", 0, err
	}
	have := map[string]bool{}
	for _, im := range f.Imports {
		p, _ := strconv.Unquote(im.Path.Value)
		have[filepath.Base(p)] = true
		if im.Name != nil {
			have[im.Name.Name] = true
		}
	}
	need := map[string]bool{}
	ast.Inspect(full, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok && id.Obj == nil && !have[id.Name] && snippetImports[id.Name] != "" { //nolint:staticcheck // Obj: the parser's own resolution is all this needs
				need[id.Name] = true
			}
		}
		return true
	})
	var imports []string
	for name := range need {
		imports = append(imports, strconv.Quote(snippetImports[name]))
	}
	sort.Strings(imports)
	var out strings.Builder
	out.WriteString("package snippet\n\n")
	if len(imports) > 0 {
		fmt.Fprintf(&out, "import (\n\t%s\n)\n\n", strings.Join(imports, "\n\t"))
	}
	rest := strings.TrimPrefix(head.String(), "package snippet\n\n") + pre
	out.WriteString(rest)
	first := strings.Count(out.String(), "\n") + 1
	out.WriteString(body)
	return out.String(), first, nil
}

// exampleSource is an Example function's body and its // Output:.
type exampleSource struct{ body, output string }

// lookupExample finds "ExampleName" in the root's *_test.go files, or
// "dir/ExampleName" in dir's.
func lookupExample(t *testing.T, cache map[string]map[string]exampleSource, ref string) *exampleSource {
	dir, name := ".", ref
	if i := strings.LastIndex(ref, "/"); i >= 0 {
		dir, name = ref[:i], ref[i+1:]
	}
	if cache[dir] == nil {
		cache[dir] = map[string]exampleSource{}
		paths, err := filepath.Glob(filepath.Join(filepath.FromSlash(dir), "*_test.go"))
		require.NoError(t, err)
		fset := token.NewFileSet()
		var files []*ast.File
		srcs := map[string][]byte{}
		for _, p := range paths {
			src, err := os.ReadFile(p)
			require.NoError(t, err)
			f, err := parser.ParseFile(fset, p, src, parser.ParseComments)
			require.NoError(t, err)
			files = append(files, f)
			srcs[p] = src
		}
		for _, ex := range doc.Examples(files...) {
			code := ex.Code.(*ast.BlockStmt)
			start, end := fset.Position(code.Lbrace), fset.Position(code.Rbrace)
			src := srcs[start.Filename]
			cache[dir]["Example"+ex.Name] = exampleSource{body: string(src[start.Offset+1 : end.Offset]), output: ex.Output}
		}
	}
	if ex, ok := cache[dir][name]; ok {
		return &ex
	}
	return nil
}

// trimLines returns s's non-blank lines, each trimmed, one per line.
func trimLines(s string) string {
	var out []string
	for l := range strings.SplitSeq(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func isElision(l string) bool {
	switch l {
	case "// ...", "// …", "...", "…":
		return true
	}
	return false
}

// excerptOf reports whether block's lines appear, trimmed and in order,
// in src: contiguous, except where an elision line stands in the block.
func excerptOf(block, src string) error {
	srcLines := strings.Split(trimLines(src), "\n")
	var chunks [][]string
	cur := []string{}
	for _, l := range strings.Split(trimLines(block), "\n") {
		if isElision(l) {
			chunks, cur = append(chunks, cur), []string{}
			continue
		}
		cur = append(cur, l)
	}
	chunks = append(chunks, cur)
	at := 0
	for _, c := range chunks {
		if len(c) == 0 {
			continue
		}
		i := indexRun(srcLines[at:], c)
		if i < 0 {
			// Say which line first fails to follow.
			best, bestLen := -1, 0
			for j := at; j < len(srcLines); j++ {
				n := 0
				for n < len(c) && j+n < len(srcLines) && srcLines[j+n] == c[n] {
					n++
				}
				if n > bestLen {
					best, bestLen = j, n
				}
			}
			if best < 0 {
				return fmt.Errorf("its line %q is not in the source", c[0])
			}
			return fmt.Errorf("after %q the source has %q, the block %q", c[bestLen-1], at1(srcLines, best+bestLen), c[bestLen])
		}
		at += i + len(c)
	}
	return nil
}

func at1(lines []string, i int) string {
	if i < len(lines) {
		return lines[i]
	}
	return "(the end)"
}

// indexRun returns where run starts in lines, or -1.
func indexRun(lines, run []string) int {
	for i := 0; i+len(run) <= len(lines); i++ {
		if slices.Equal(lines[i:i+len(run)], run) {
			return i
		}
	}
	return -1
}

// checkPackageDoc checks that every code block of doc.go's package
// comment is an excerpt of a Go block of README.md, and that there is
// at least one.
func checkPackageDoc(t *testing.T, blocks []mdBlock) {
	f, err := parser.ParseFile(token.NewFileSet(), "doc.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	require.NoError(t, err)
	require.NotNil(t, f.Doc, "doc.go has no package comment")
	d := new(comment.Parser).Parse(f.Doc.Text())
	n := 0
	for _, blk := range d.Content {
		code, ok := blk.(*comment.Code)
		if !ok {
			continue
		}
		n++
		var errs []string
		found := false
		for _, b := range blocks {
			if b.file != "README.md" || b.info != "go" {
				continue
			}
			if err := excerptOf(code.Text, b.code); err == nil {
				found = true
				break
			} else {
				errs = append(errs, b.pos()+": "+err.Error())
			}
		}
		if !found {
			t.Errorf("doc.go: code block %d is not an excerpt of any Go block of README.md:\n%s\n(first lines of the nearest: %s)", n, code.Text, strings.Join(errs[:min(len(errs), 1)], ""))
		}
	}
	require.Positive(t, n, "doc.go's package comment has no code block")
}

// builtBlock is a block as it is built: a whole file, or a fragment in
// its wrapper, with the line of src where the block's first line is.
type builtBlock struct {
	mdBlock
	src   string
	first int
}

var vetLineRE = regexp.MustCompile(`(?m)^(?:vet: )?\.?/?(b\d+)/snippet\.go:(\d+)(?::\d+)?:\s*(.*)$`)

// vetBlocks writes each block to a package of its own in a temporary
// module and vets them all with one go vet, reporting errors at the
// block's line in its Markdown file.
func vetBlocks(t *testing.T, root, mod string, built []builtBlock) {
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	require.NoError(t, err)
	gosum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	require.NoError(t, err)
	var m bytes.Buffer
	m.WriteString("module snippets\n\n")
	sc := bufio.NewScanner(bytes.NewReader(gomod))
	for sc.Scan() { // the root's go line and requirements, so that nothing is resolved anew
		if l := sc.Text(); !strings.HasPrefix(l, "module ") {
			m.WriteString(l + "\n")
		}
	}
	fmt.Fprintf(&m, "\nrequire github.com/httpbreaker/httpbreaker v0.0.0\n\nreplace github.com/httpbreaker/httpbreaker => %s\n", strconv.Quote(root))
	require.NoError(t, os.WriteFile(filepath.Join(mod, "go.mod"), m.Bytes(), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(mod, "go.sum"), gosum, 0o644))
	for i, b := range built {
		dir := filepath.Join(mod, fmt.Sprintf("b%d", i))
		require.NoError(t, os.Mkdir(dir, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "snippet.go"), []byte(b.src), 0o644))
	}

	cmd := exec.Command("go", "vet", "./...")
	cmd.Dir = mod
	cmd.Env = append(os.Environ(), "GOPROXY=off", "GOWORK=off", "GOFLAGS=-mod=readonly")
	out, err := cmd.CombinedOutput()
	if err == nil {
		return
	}
	reported := false
	for _, sub := range vetLineRE.FindAllStringSubmatch(string(out), -1) {
		i, _ := strconv.Atoi(strings.TrimPrefix(sub[1], "b"))
		line, _ := strconv.Atoi(sub[2])
		b := built[i]
		t.Errorf("%s:%d: %s", b.file, b.line+line-b.first, sub[3])
		reported = true
	}
	if !reported {
		t.Errorf("go vet of the README's and docs' Go blocks failed: %v\n%s", err, out)
	}
}

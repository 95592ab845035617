package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Command blocks of README.md and docs/*.md marked runnable are run as
// written, so that the docs cannot drift from the commands. The marker is
// an HTML comment on the line before a ```sh fence:
//
//	<!-- runnable -->
//	```sh
//	harvest ...
//	```
//
// A block runs under `bash -euo pipefail` from the repository's root, with
// the harvest of this tree first on the PATH and no HARVEST_* variables of
// the caller; it passes if it exits 0 within runnableTimeout. Blocks use the
// simulated cluster or start what they need themselves (a queue, a pilot).

const runnableMarker = "<!-- runnable -->"

const runnableTimeout = 2 * time.Minute

// docBlock is one runnable block.
type docBlock struct {
	file string
	line int // of the fence, 1-based
	code string
}

func (b docBlock) String() string { return fmt.Sprintf("%s:%d", b.file, b.line) }

// runnableBlocks returns the marked blocks of one markdown file; a marker
// not followed by a sh fence is an error (a marker that marks nothing).
func runnableBlocks(name, text string) ([]docBlock, error) {
	var out []docBlock
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	n, marked := 0, false
	var cur *docBlock
	indent := ""
	for sc.Scan() {
		n++
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case cur != nil && trimmed == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.code += strings.TrimPrefix(line, indent) + "\n"
		case marked && (trimmed == "```sh" || trimmed == "```bash"):
			cur = &docBlock{file: name, line: n}
			indent = line[:len(line)-len(strings.TrimLeft(line, " \t"))]
			marked = false
		case marked:
			return nil, fmt.Errorf("%s:%d: %s is not followed by a ```sh block", name, n-1, runnableMarker)
		case trimmed == runnableMarker:
			marked = true
		}
	}
	if cur != nil {
		return nil, fmt.Errorf("%s:%d: the runnable block is not closed", name, cur.line)
	}
	if marked {
		return nil, fmt.Errorf("%s: %s at the end of the file", name, runnableMarker)
	}
	return out, sc.Err()
}

// runBlock runs b with bin's directory first on the PATH; the error holds
// the block's output. Whatever the block left running (a background
// queue) is killed with its process group.
func runBlock(ctx context.Context, b docBlock, bin, dir string) error {
	ctx, cancel := context.WithTimeout(ctx, runnableTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", b.code)
	cmd.Dir = dir
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "HARVEST_") && !strings.HasPrefix(kv, "PATH=") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, "PATH="+filepath.Dir(bin)+":"+os.Getenv("PATH"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if cmd.Process != nil {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	if err != nil {
		return fmt.Errorf("%s: %v\n%s\n--- output:\n%s", b, err, b.code, out)
	}
	return nil
}

func docsFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{"../../README.md"}, files...)
}

func TestTheDocsRunnableBlocksRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the docs' commands (a queue, a pilot, the simulated cluster)")
	}
	var blocks []docBlock
	for _, f := range docsFiles(t) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		bs, err := runnableBlocks(strings.TrimPrefix(f, "../../"), string(b))
		if err != nil {
			t.Fatal(err)
		}
		blocks = append(blocks, bs...)
	}
	// The README's try-it and first-agent blocks and the admin guide's dry run at least: a marker lost
	// in an edit is noticed.
	if len(blocks) < 3 {
		t.Fatalf("found %d runnable blocks in the docs, want at least 3", len(blocks))
	}
	bin := builtHarvestForDocs(t)
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range blocks {
		t.Run(b.String(), func(t *testing.T) {
			if err := runBlock(t.Context(), b, bin, root); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestARunnableBlockWithAWrongCommandFails(t *testing.T) {
	bin := builtHarvestForDocs(t)
	doc := "text\n\n" + runnableMarker + "\n```sh\nharvest version\nharvest submit --no-such-flag ds -- prog {input}\n```\n"
	blocks, err := runnableBlocks("wrong.md", doc)
	if err != nil || len(blocks) != 1 || blocks[0].line != 4 {
		t.Fatalf("blocks %v, err %v", blocks, err)
	}
	err = runBlock(t.Context(), blocks[0], bin, t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "wrong.md:4") || !strings.Contains(err.Error(), "no-such-flag") {
		t.Errorf("a wrong command passed or its error does not say where: %v", err)
	}
	// The same block with a right command passes: the failure was the command's.
	blocks[0].code = "harvest version\n"
	if err := runBlock(t.Context(), blocks[0], bin, t.TempDir()); err != nil {
		t.Errorf("harvest version failed: %v", err)
	}
}

func TestAMisplacedRunnableMarkerIsAnError(t *testing.T) {
	for _, doc := range []string{
		runnableMarker + "\nsome prose\n```sh\ntrue\n```\n",
		runnableMarker + "\n```console\n$ true\n```\n",
		runnableMarker + "\n```sh\ntrue\n",
		"text\n" + runnableMarker + "\n",
	} {
		if _, err := runnableBlocks("x.md", doc); err == nil {
			t.Errorf("accepted %q", doc)
		}
	}
	// Indented blocks (inside a list item) keep their commands.
	bs, err := runnableBlocks("x.md", "1. step\n\n   "+runnableMarker+"\n   ```sh\n   echo a\n     echo b\n   ```\n")
	if err != nil || len(bs) != 1 || bs[0].code != "echo a\n  echo b\n" {
		t.Errorf("indented block: %q %v", bs, err)
	}
}

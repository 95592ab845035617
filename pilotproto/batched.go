package pilotproto

// Placeholders of a batched command (issue 30 item 3): a job whose
// command holds {inputs} is run once per batch, with every entry of the
// batch as arguments in place of {inputs} (xargs-style), and, in place of
// {outputs}, each entry's output directory in the same order (the worker
// makes them). Such a command may not use the one-task placeholders
// {input}, {output} and {task}; {job} keeps its meaning.
const (
	PlaceholderInputs  = "{inputs}"
	PlaceholderOutputs = "{outputs}"
)

// MaxBatchedEntries bounds the batch size of a batched command: its
// entries become arguments of one exec, which the kernel bounds (ARG_MAX).
const MaxBatchedEntries = 1000

// Batched reports whether argv is a batched command (an argument is
// {inputs}).
func Batched(argv []string) bool {
	for _, a := range argv {
		if a == PlaceholderInputs {
			return true
		}
	}
	return false
}

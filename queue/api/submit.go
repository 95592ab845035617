package api

// Submissions of large datasets (POST /v1/jobs): the queue lists the
// dataset and stores its tasks away from the connection, so a client that
// goes away does not lose the job, and a retry carrying the same
// Idempotency-Key gets the first job instead of a second.
const (
	// HeaderIdempotencyKey names a submission (1-255 printable ASCII
	// characters, unique per user): a retry with the same key and the
	// same body gets the job the first request created (or joins it while
	// it is being stored); the same key with another body is a conflict.
	HeaderIdempotencyKey = "Idempotency-Key"
	// HeaderReplayed is "true" on an answer that replays an earlier
	// submission with the same key.
	HeaderReplayed = "Idempotent-Replayed"
	// ContentTypeNDJSON asked for in Accept makes POST /v1/jobs answer 200
	// with one SubmitEvent per line: progress while the dataset is listed
	// and stored, then the job or the error. Errors found before the
	// stream begins (validation) are ordinary error answers.
	ContentTypeNDJSON = "application/x-ndjson"
	// MaxIdempotencyKey is the longest key accepted.
	MaxIdempotencyKey = 255
)

// Phases of a submission.
const (
	PhaseListing = "listing" // reading the dataset's entries
	PhaseStoring = "storing" // inserting its tasks
)

// SubmitProgress is how far a submission is.
type SubmitProgress struct {
	Phase   string `json:"phase"`
	Entries int    `json:"entries"` // entries listed so far (all of them once storing)
	Stored  int    `json:"stored"`  // tasks stored so far
}

// SubmitEvent is one line of a streamed submission: progress, or the end
// (the job, or an error with its code).
type SubmitEvent struct {
	Progress *SubmitProgress `json:"progress,omitempty"`
	Job      *Job            `json:"job,omitempty"`
	Replayed bool            `json:"replayed,omitempty"`
	Error    string          `json:"error,omitempty"`
	Code     Code            `json:"code,omitempty"`
}

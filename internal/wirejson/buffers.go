package wirejson

import (
	"bytes"
	"sync"
)

// Bodies are read into lent buffers: nothing Decode fills points into the
// bytes it decoded (strings are copied, by it or by encoding/json; the hot
// messages hold no json.RawMessage), so a buffer goes back as soon as
// Decode returns. io.ReadAll's growing copies were a tenth of the bytes
// the queue and master allocated in `harvest bench dispatch`.
var bodies = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxLent keeps a rare huge body's buffer out of the pool.
const maxLent = 1 << 20

// GetBuffer lends an empty buffer to read a body into.
func GetBuffer() *bytes.Buffer {
	b := bodies.Get().(*bytes.Buffer)
	b.Reset()
	return b
}

// PutBuffer takes b back.
func PutBuffer(b *bytes.Buffer) {
	if b.Cap() <= maxLent {
		bodies.Put(b)
	}
}

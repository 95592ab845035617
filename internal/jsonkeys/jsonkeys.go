// Package jsonkeys refuses the object keys of a JSON body whose meaning
// depends on the parser (encoding/json keeps the last of two equal keys,
// and matches a struct's field names without regard to case, where other
// parsers keep the first or refuse): duplicate keys, keys that differ only
// in case, and, given a type's field names, any key that is not exactly
// one. It scans the bytes once, without decoding the values, for the
// bodies too large for a token-by-token pass (a master's heartbeat lists
// every task it holds).
package jsonkeys

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
)

// MaxKeys bounds the keys of one object when no names are given (each
// key is compared with the object's others).
const MaxKeys = 256

// Check scans b, one JSON value that a decoder has accepted (valid JSON),
// and refuses a key given twice in one object, two keys of one object
// that differ only in case, more than MaxKeys keys in one object, and,
// when names is not nil, a key that is none of names exactly. Objects are
// taken for structs (case-folded keys are refused): use it for types
// without maps.
func Check(b []byte, names map[string]bool) error {
	var open []int    // per open object or array: where its keys start in keys; -1 for an array
	var keys [][]byte // the keys of the open objects
	key := false      // the next string is a key
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '{':
			open = append(open, len(keys))
			key = true
		case '[':
			open = append(open, -1)
		case '}', ']':
			if n := len(open); n > 0 {
				if from := open[n-1]; from >= 0 {
					keys = keys[:from]
				}
				open = open[:n-1]
			}
			key = false
		case ',':
			key = len(open) > 0 && open[len(open)-1] >= 0
		case '"':
			j, esc := i+1, false
			for ; j < len(b) && b[j] != '"'; j++ {
				if b[j] == '\\' {
					j++
					esc = true
				}
			}
			if key && len(open) > 0 {
				k := b[i+1 : min(j, len(b))]
				if esc {
					var s string
					if err := json.Unmarshal(b[i:min(j+1, len(b))], &s); err != nil {
						return fmt.Errorf("malformed key %s", b[i:min(j+1, len(b))])
					}
					k = []byte(s)
				}
				if names != nil && !names[string(k)] {
					return fmt.Errorf("unknown field %q (names are case-sensitive)", k)
				}
				from := open[len(open)-1]
				for _, o := range keys[from:] {
					switch {
					case bytes.Equal(o, k):
						return fmt.Errorf("duplicate key %q", k)
					case bytes.EqualFold(o, k):
						return fmt.Errorf("keys %q and %q differ only in case", o, k)
					}
				}
				if names == nil && len(keys)-from >= MaxKeys {
					return fmt.Errorf("more than %d keys in one object", MaxKeys)
				}
				keys = append(keys, k)
				key = false
			}
			i = j
		}
	}
	return nil
}

// Names returns the JSON names of the fields of the structs t is made of
// (through pointers, slices, arrays and embedded structs), for Check.
func Names(t reflect.Type) map[string]bool {
	out := map[string]bool{}
	seen := map[reflect.Type]bool{}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || seen[t] {
			return
		}
		seen[t] = true
		for i := range t.NumField() {
			f := t.Field(i)
			tag := f.Tag.Get("json")
			if tag == "-" || (!f.IsExported() && !f.Anonymous) {
				continue
			}
			name, _, _ := strings.Cut(tag, ",")
			if f.Anonymous && name == "" {
				walk(f.Type)
				continue
			}
			if name == "" {
				name = f.Name
			}
			out[name] = true
			walk(f.Type)
		}
	}
	walk(t)
	return out
}

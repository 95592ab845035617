// Package jsonkeys refuses what a parser could read two ways in a JSON
// body, or would read as a value that was not sent, without decoding it
// again: duplicate keys (encoding/json keeps the last of two equal keys,
// other parsers the first), keys that differ only in case (encoding/json
// matches a struct's field names without regard to case), keys that are
// not a field's exact name, and null where the Go type cannot hold it
// (encoding/json leaves the field as it was: a "running": null or an
// "epoch": null read as 0). It scans the bytes once, for the bodies too
// large for a token-by-token pass (a master's heartbeat lists every task
// it holds).
package jsonkeys

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync"
)

// MaxKeys bounds the keys of one object that are no field's name (each
// key is compared with the object's others).
const MaxKeys = 256

// Shape is the Go type a body decodes into, as Check needs it.
type Shape struct {
	root *node
	// unknown: keys that are no field's name (in any case) are let
	// through, their values unchecked (a newer peer may send some).
	unknown bool
}

// node is one value's type: nil is anything (an interface, a type with
// its own UnmarshalJSON, an unknown key's value).
type node struct {
	nullable bool             // null may stand here: pointer, slice, map
	fields   map[string]*node // a struct's fields by exact JSON name
	folded   map[string]string
	elem     *node // a slice's, array's or map's element
	isMap    bool
}

var (
	shapes      sync.Map // shapeKey -> *Shape
	unmarshaler = reflect.TypeFor[json.Unmarshaler]()
)

type shapeKey struct {
	t       reflect.Type
	unknown bool
}

// For returns the Shape of t (made once). With unknown, keys that match
// no field even without regard to case are let through.
func For(t reflect.Type, unknown bool) *Shape {
	k := shapeKey{t, unknown}
	if s, ok := shapes.Load(k); ok {
		return s.(*Shape)
	}
	s := &Shape{root: build(t, map[reflect.Type]*node{}), unknown: unknown}
	shapes.Store(k, s)
	return s
}

func build(t reflect.Type, seen map[reflect.Type]*node) *node {
	if t.Kind() == reflect.Interface || reflect.PointerTo(t).Implements(unmarshaler) {
		return nil
	}
	if n, ok := seen[t]; ok {
		return n
	}
	n := &node{}
	seen[t] = n
	switch t.Kind() {
	case reflect.Pointer:
		e := build(t.Elem(), seen)
		if e == nil {
			seen[t] = nil
			return nil
		}
		*n = *e // a struct's maps are shared: a recursive type's fields are filled later
		n.nullable = true
	case reflect.Slice, reflect.Map:
		n.nullable, n.isMap, n.elem = true, t.Kind() == reflect.Map, build(t.Elem(), seen)
	case reflect.Array:
		n.elem = build(t.Elem(), seen)
	case reflect.Struct:
		n.fields, n.folded = map[string]*node{}, map[string]string{}
		addFields(n, t, seen)
	}
	return n
}

// addFields adds t's fields (an embedded struct's too) to n.
func addFields(n *node, t reflect.Type, seen map[reflect.Type]*node) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" || (!f.IsExported() && !f.Anonymous) {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				addFields(n, ft, seen)
				continue
			}
		}
		if name == "" {
			name = f.Name
		}
		n.fields[name] = build(f.Type, seen)
		n.folded[strings.ToLower(name)] = name
	}
}

// Check scans b, one JSON value that a decoder has accepted into the Go
// type of s (valid JSON), and refuses a key given twice in one object,
// two keys of one struct's object that differ only in case, a key that
// is no field's exact name (with s's unknown, only one that is a field's
// name in another case), more than MaxKeys keys that are no field's name
// in one object, and null where the type cannot hold it (a number, a
// string, a boolean, a struct; a pointer, slice or map may be null).
func (s *Shape) Check(b []byte) error {
	type frame struct {
		n    *node
		from int    // where the object's keys start in keys; -1 for an array
		key  []byte // the key whose value it is (nil: the body, or an element)
	}
	var open []frame
	var keys [][]byte // the keys of the open objects
	next := s.root    // the type of the value to come
	var last []byte   // its key; nil: an element of the array open, or the body
	key := false      // the next string is a key
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '{':
			open = append(open, frame{n: next, from: len(keys), key: last})
			key = true
		case '[':
			open = append(open, frame{n: next, from: -1, key: last})
			next, last = elemOf(next), nil
		case '}', ']':
			if n := len(open); n > 0 {
				if from := open[n-1].from; from >= 0 {
					keys = keys[:from]
				}
				open = open[:n-1]
			}
			key = false
		case ',':
			if n := len(open); n > 0 {
				if f := open[n-1]; f.from >= 0 {
					key = true
				} else {
					next, last = elemOf(f.n), nil
				}
			}
		case 'n': // outside a string, in valid JSON, only null
			if next != nil && !next.nullable {
				where := "the body"
				switch {
				case last != nil:
					where = fmt.Sprintf("%q", last)
				case len(open) > 0 && open[len(open)-1].key != nil:
					where = fmt.Sprintf("an element of %q", open[len(open)-1].key)
				case len(open) > 0:
					where = "an element of a list"
				}
				return fmt.Errorf("null for %s, where a value is required", where)
			}
			i += len("null") - 1
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
					var str string
					if err := json.Unmarshal(b[i:min(j+1, len(b))], &str); err != nil {
						return fmt.Errorf("malformed key %s", b[i:min(j+1, len(b))])
					}
					k = []byte(str)
				}
				f := open[len(open)-1]
				var known bool
				var err error
				if next, known, err = s.value(f.n, k); err != nil {
					return err
				}
				last = k
				struc := f.n == nil || f.n.fields != nil
				for _, o := range keys[f.from:] {
					switch {
					case bytes.Equal(o, k):
						return fmt.Errorf("duplicate key %q", k)
					case struc && bytes.EqualFold(o, k):
						return fmt.Errorf("keys %q and %q differ only in case", o, k)
					}
				}
				if !known && len(keys)-f.from >= MaxKeys {
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

// value is the node of key k's value in an object of n, and whether k
// is a field's name.
func (s *Shape) value(n *node, k []byte) (*node, bool, error) {
	switch {
	case n == nil:
		return nil, false, nil
	case n.isMap:
		return n.elem, false, nil
	case n.fields == nil:
		return nil, false, nil // not an object: the decoder has refused it
	}
	if v, ok := n.fields[string(k)]; ok {
		return v, true, nil
	}
	if !s.unknown {
		return nil, false, fmt.Errorf("unknown field %q (names are case-sensitive)", k)
	}
	if f, ok := n.folded[strings.ToLower(string(k))]; ok {
		return nil, false, fmt.Errorf("key %q differs only in case from field %q (names are case-sensitive)", k, f)
	}
	return nil, false, nil
}

func elemOf(n *node) *node {
	if n == nil {
		return nil
	}
	return n.elem
}

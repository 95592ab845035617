package main

import (
	"reflect"
	"testing"
)

// TestTaskDirectoriesTakeCommasOrColons: --pilot-env cuts its values at
// commas, so an admin passes HARVEST_TASK_READ=/cvmfs:/apps.
func TestTaskDirectoriesTakeCommasOrColons(t *testing.T) {
	got := dirList([]string{"/cvmfs:/apps", " /sw ", "", "/a::/b"})
	if want := []string{"/cvmfs", "/apps", "/sw", "/a", "/b"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

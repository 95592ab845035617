package htcondor

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestOptionsMapOntoTheConfig(t *testing.T) {
	c, err := ConfigFromOptions(map[string]string{
		"tag":              "site-harvest",
		"pool":             "cm.example.org:9618",
		"schedd":           "submit01.example.org",
		"timeout":          "30s",
		"bin_dir":          "/usr/bin",
		"slot_cpus":        "8",
		"slot_memory_mb":   "16000",
		"max_lifetime":     "12h",
		"lifetime":         "allowed_job_duration",
		"submit_lines":     "accounting_group = group_harvest\n+ProjectName = \"harvest\"\n",
		"output_dir":       "/scratch/harvest",
		"format":           "long",
		"limit_attributes": "MaxRuntime, JobMaxWallTime",
		"submit_user":      "harvest",
		"max_output_mb":    "16",
		"max_jobs":         "5000",
		"max_slots":        "700",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		Tag: "site-harvest", Pool: "cm.example.org:9618", Schedd: "submit01.example.org",
		CommandTimeout: 30 * time.Second, BinDir: "/usr/bin", SlotCPUs: 8, SlotMemoryMB: 16000,
		MaxLifetime: 12 * time.Hour, Lifetime: LifetimeAllowedJobDuration,
		ExtraSubmit: []string{"accounting_group = group_harvest", `+ProjectName = "harvest"`},
		OutputDir:   "/scratch/harvest", Format: FormatLong, LimitAttributes: []string{"MaxRuntime", "JobMaxWallTime"},
		SubmitUser: "harvest", MaxOutput: 16 << 20, MaxJobs: 5000, MaxSlots: 700,
	}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("got  %+v\nwant %+v", c, want)
	}
}

func TestNoOptionsGiveTheDefaults(t *testing.T) {
	c, err := ConfigFromOptions(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c, DefaultConfig()) {
		t.Fatalf("got %+v", c)
	}
	if c.Tag != "harvest-pilot" || c.CommandTimeout != 10*time.Second || c.SlotCPUs != 0 {
		t.Fatalf("defaults changed: %+v", c)
	}
}

func TestBadOptionsAreRefusedWithAClearError(t *testing.T) {
	cases := []struct {
		name string
		opts map[string]string
		want string
	}{
		{"an unknown key (a typo)", map[string]string{"max_lifetme": "1h"}, "unknown adapter option"},
		{"a duration that is not one", map[string]string{"timeout": "ten"}, "option timeout"},
		{"a negative timeout", map[string]string{"timeout": "-1s"}, "command timeout"},
		{"a tag with a quote", map[string]string{"tag": `x"y`}, "tag"},
		{"memory without cpus", map[string]string{"slot_memory_mb": "100"}, "without slot cpus"},
		{"an unknown lifetime mode", map[string]string{"lifetime": "kill"}, "lifetime enforcement"},
		{"a submit line that queues", map[string]string{"submit_lines": "queue 10"}, "adapter owns"},
		{"a submit line that forges the tag", map[string]string{"submit_lines": `+HarvestPilot = "other"`}, "adapter owns"},
		{"a relative output dir", map[string]string{"output_dir": "logs"}, "absolute"},
		{"an unknown format", map[string]string{"format": "xml"}, "format"},
		{"a bad limit attribute", map[string]string{"limit_attributes": "Max Runtime"}, "limit attribute"},
		{"a pool name with blanks", map[string]string{"pool": "a b"}, "pool"},
		{"a submit user that is no account name", map[string]string{"submit_user": "-u root"}, "submit user"},
		{"no output allowed", map[string]string{"max_output_mb": "0"}, "max_output_mb"},
		{"no job allowed", map[string]string{"max_jobs": "0"}, "max jobs"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ConfigFromOptions(tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one mentioning %q", err, tc.want)
			}
			if _, err := NewFromOptions(tc.opts); err == nil {
				t.Fatal("NewFromOptions accepted what ConfigFromOptions refused")
			}
		})
	}
}

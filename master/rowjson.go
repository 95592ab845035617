package master

import "github.com/harvest-hpc/harvest/internal/wirejson"

// The tasks table's body and result columns hold a task and a result as
// encoding/json writes them; the compaction writes them with the dispatch
// path's encoders (internal/wirejson), byte for byte the same
// (TestRowJSONIsWhatEncodingJSONWrites), without reflection.
var (
	appendTaskJSON   = wirejson.AppendTask
	appendResultJSON = wirejson.AppendResult
	appendJSONString = wirejson.AppendString
)

package policy

// Recommend maps leftTasks (pending + running tasks of the harvest queue)
// to the MiniNode recommendation the master sends at each round. A
// negative count is read as zero.
func Recommend(leftTasks int, m RecommendConfig) int {
	if leftTasks < 0 {
		leftTasks = 0
	}
	switch {
	case leftTasks < m.FewTasks:
		return m.FewNodes
	case leftTasks < m.SomeTasks:
		return m.SomeNodes
	case leftTasks < m.ManyTasks:
		per := m.TasksPerNode
		if per < 1 {
			per = 1 // an invalid mapping must not panic
		}
		return leftTasks/per + m.Base
	}
	return m.ManyNodes
}

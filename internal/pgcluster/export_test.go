package pgcluster

// StartWith is Start with a test's port picker.
var StartWith = startWith

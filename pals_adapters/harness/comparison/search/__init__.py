"""compare's search: each row's settings chosen by their score on a selection part of the training data
(never the dev set), every row given the same search, before the row's seeds run with what it chose."""

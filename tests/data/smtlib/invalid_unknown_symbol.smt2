(declare-const x Int)
(assert (>= x 0))
(assert (= x (+ y 1)))
(check-sat)

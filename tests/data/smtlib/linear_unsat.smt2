; contradiction found by propagation alone
(declare-const x Int)
(declare-const y Int)
(assert (>= x 0))
(assert (= y (+ x 1)))
(assert (<= y 0))
(check-sat)

; exported by verifuse (verifuse_encoder_dynamic_sat.smt2): TinyEncoder, torch.compile(dynamic=True)
; verifuse shape program: Dynamo's guards (hypotheses), then the plan's shape assumptions
(set-option :produce-models true)
(declare-const x_size1 Int)
(set-info :example-x_size1 16)
(declare-const x_size2 Int)
(set-info :example-x_size2 32)
(declare-const x_size0 Int)
(set-info :example-x_size0 2)
; var_to_range: x_size1 >= 2
(define-fun guard_0 () Bool (>= x_size1 2))
(assert guard_0)
; var_to_range: x_size2 >= 32
(define-fun guard_1 () Bool (>= x_size2 32))
(assert guard_1)
; var_to_range: x_size2 <= 32
(define-fun guard_2 () Bool (<= x_size2 32))
(assert guard_2)
; var_to_range: x_size0 >= 2
(define-fun guard_3 () Bool (>= x_size0 2))
(assert guard_3)
; replacement: x_size2 == 32
(define-fun guard_4 () Bool (= x_size2 32))
(assert guard_4)
; guard: x_size2 == 32
(define-fun guard_5 () Bool (= x_size2 32))
(assert guard_5)
; assumption positive size (arg2_1.size(0)): entailed [verifuse-shapes:reasoning]
(define-fun assume_0 () Bool (>= x_size0 1))
(assert assume_0)
; assumption positive size (arg2_1.size(1)): entailed [verifuse-shapes:reasoning]
(define-fun assume_1 () Bool (>= x_size1 1))
(assert assume_1)
; assumption view keeps element count (view, view_3, view_4, view_7...): entailed [structural]
(define-fun assume_2 () Bool (= (* 32 x_size1 x_size0) (* 32 x_size1 x_size0)))
(assert assume_2)
; assumption view merges contiguous dims (view, view_3, view_4, view_7...): entailed [structural]
(define-fun assume_3 () Bool (or (= (* 32 x_size1) (* 32 x_size1)) (= x_size0 1)))
(assert assume_3)
; assumption view keeps element count (view_1, view_2): entailed [structural]
(define-fun assume_4 () Bool (= (* 96 x_size1 x_size0) (* 96 x_size1 x_size0)))
(assert assume_4)
; assumption matmul batch sizes equal (bmm, bmm_1): entailed [structural]
(define-fun assume_5 () Bool (= (* 4 x_size0) (* 4 x_size0)))
(assert assume_5)
; assumption view keeps element count (view_5, view_6): entailed [structural]
(define-fun assume_6 () Bool (= (* 4 x_size0 (* x_size1 x_size1)) (* 4 x_size0 (* x_size1 x_size1))))
(assert assume_6)
; assumption view merges contiguous dims (view_6): entailed [structural]
(define-fun assume_7 () Bool (or (= (* 4 (* x_size1 x_size1)) (* 4 (* x_size1 x_size1))) (= x_size0 1)))
(assert assume_7)
; assumption matmul inner sizes equal (bmm_1): entailed [structural]
(define-fun assume_8 () Bool (= x_size1 x_size1))
(assert assume_8)
; assumption view keeps element count (view_13, view_14): entailed [structural]
(define-fun assume_9 () Bool (= (* 64 x_size1 x_size0) (* 64 x_size1 x_size0)))
(assert assume_9)
; assumption view merges contiguous dims (view_14): entailed [structural]
(define-fun assume_10 () Bool (or (= (* 64 x_size1) (* 64 x_size1)) (= x_size0 1)))
(assert assume_10)
(define-fun output0_size0 () Int x_size0)
(define-fun output0_size1 () Int x_size1)
(define-fun output0_size2 () Int 32)
(check-sat)
(get-value (x_size0 x_size1 x_size2))

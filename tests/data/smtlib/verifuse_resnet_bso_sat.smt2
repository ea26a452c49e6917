; exported by verifuse (verifuse_resnet_bso_sat.smt2): SmallResNet, torch.compile(dynamic=True, backed_size_oblivious)
; verifuse shape program: Dynamo's guards (hypotheses), then the plan's shape assumptions
(set-option :produce-models true)
(declare-const x_size1 Int)
(set-info :example-x_size1 3)
(declare-const x_size2 Int)
(set-info :example-x_size2 32)
(declare-const x_size0 Int)
(set-info :example-x_size0 1)
; var_to_range: x_size1 >= 3
(define-fun guard_0 () Bool (>= x_size1 3))
(assert guard_0)
; var_to_range: x_size1 <= 3
(define-fun guard_1 () Bool (<= x_size1 3))
(assert guard_1)
; var_to_range: x_size2 >= 0
(define-fun guard_2 () Bool (>= x_size2 0))
(assert guard_2)
; var_to_range: x_size0 >= 0
(define-fun guard_3 () Bool (>= x_size0 0))
(assert guard_3)
; var_to_range: x_size0 <= 15
(define-fun guard_4 () Bool (<= x_size0 15))
(assert guard_4)
; replacement: x_size1 == 3
(define-fun guard_5 () Bool (= x_size1 3))
(assert guard_5)
; guard: x_size1 == 3
(define-fun guard_6 () Bool (= x_size1 3))
(assert guard_6)
; guard: x_size0 < 16
(define-fun guard_7 () Bool (< x_size0 16))
(assert guard_7)
; assumption positive size (arg3_1.size(0)): NOT entailed by Dynamo's guards: runtime guard added [verifuse-shapes:reasoning (counterexample)]
(define-fun assume_0 () Bool (>= x_size0 1))
(assert assume_0)
; assumption positive size (arg3_1.size(2), arg3_1.size(3), convolution_3): NOT entailed by Dynamo's guards: runtime guard added [verifuse-shapes:reasoning (counterexample)]
(define-fun assume_1 () Bool (>= x_size2 1))
(assert assume_1)
; assumption convolution window fits (convolution, convolution_1, convolution_2, convolution_4): NOT entailed by Dynamo's guards: implied by the other added guards [verifuse-shapes:reasoning (counterexample); implied by the other added guards]
(define-fun assume_2 () Bool (>= (+ 2 x_size2) 3))
(assert assume_2)
; assumption convolution window fits (convolution_5, convolution_7): NOT entailed by Dynamo's guards: implied by the other added guards [verifuse-shapes:reasoning (counterexample); implied by the other added guards]
(define-fun assume_3 () Bool (>= (+ 3 (div (+ (- 1) x_size2) 2)) 3))
(assert assume_3)
; assumption convolution window fits (convolution_6): NOT entailed by Dynamo's guards: implied by the other added guards [verifuse-shapes:reasoning (counterexample); implied by the other added guards]
(define-fun assume_4 () Bool (>= (+ 1 (div (+ (- 1) x_size2) 2)) 1))
(assert assume_4)
; assumption convolution window fits (convolution_8, convolution_10): NOT entailed by Dynamo's guards: implied by the other added guards [verifuse-shapes:reasoning (counterexample); implied by the other added guards]
(define-fun assume_5 () Bool (>= (+ 3 (div (+ (- 1) x_size2) 4)) 3))
(assert assume_5)
; assumption convolution window fits (convolution_9): NOT entailed by Dynamo's guards: implied by the other added guards [verifuse-shapes:reasoning (counterexample); implied by the other added guards]
(define-fun assume_6 () Bool (>= (+ 1 (div (+ (- 1) x_size2) 4)) 1))
(assert assume_6)
; assumption convolution window fits (convolution_11): NOT entailed by Dynamo's guards: implied by the other added guards [verifuse-shapes:reasoning (counterexample); implied by the other added guards]
(define-fun assume_7 () Bool (>= (+ 3 (div (+ (- 1) x_size2) 8)) 3))
(assert assume_7)
; assumption view keeps element count (view): entailed [structural]
(define-fun assume_8 () Bool (= (* 64 x_size0) (* 64 x_size0)))
(assert assume_8)
(define-fun output0_size0 () Int x_size0)
(define-fun output0_size1 () Int 10)
(check-sat)
(get-value (x_size0 x_size1 x_size2))

; exported by verifuse (verifuse_resnet_dynamic_sat.smt2): SmallResNet, torch.compile(dynamic=True)
; verifuse shape program: Dynamo's guards (hypotheses), then the plan's shape assumptions
(set-option :produce-models true)
(declare-const x_size1 Int)
(set-info :example-x_size1 3)
(declare-const x_size2 Int)
(set-info :example-x_size2 32)
(declare-const x_size0 Int)
(set-info :example-x_size0 2)
; var_to_range: x_size1 >= 3
(define-fun guard_0 () Bool (>= x_size1 3))
(assert guard_0)
; var_to_range: x_size1 <= 3
(define-fun guard_1 () Bool (<= x_size1 3))
(assert guard_1)
; var_to_range: x_size2 >= 2
(define-fun guard_2 () Bool (>= x_size2 2))
(assert guard_2)
; var_to_range: x_size0 >= 2
(define-fun guard_3 () Bool (>= x_size0 2))
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
; guard: (1 + ((-1 + x_size2) // 2)) != 1
(define-fun guard_8 () Bool (not (= (+ 1 (div (+ (- 1) x_size2) 2)) 1)))
(assert guard_8)
; guard: ((1 + ((-1 + x_size2) // 2)) ** 2) != 1
(define-fun guard_9 () Bool (not (= (* (+ 1 (div (+ (- 1) x_size2) 2)) (+ 1 (div (+ (- 1) x_size2) 2))) 1)))
(assert guard_9)
; guard: (1 + ((-1 + x_size2) // 4)) != 1
(define-fun guard_10 () Bool (not (= (+ 1 (div (+ (- 1) x_size2) 4)) 1)))
(assert guard_10)
; guard: ((1 + ((-1 + x_size2) // 4)) ** 2) != 1
(define-fun guard_11 () Bool (not (= (* (+ 1 (div (+ (- 1) x_size2) 4)) (+ 1 (div (+ (- 1) x_size2) 4))) 1)))
(assert guard_11)
; guard: (1 + ((-1 + x_size2) // 8)) != 1
(define-fun guard_12 () Bool (not (= (+ 1 (div (+ (- 1) x_size2) 8)) 1)))
(assert guard_12)
; guard: ((1 + ((-1 + x_size2) // 8)) ** 2) != 1
(define-fun guard_13 () Bool (not (= (* (+ 1 (div (+ (- 1) x_size2) 8)) (+ 1 (div (+ (- 1) x_size2) 8))) 1)))
(assert guard_13)
; assumption positive size (arg3_1.size(0)): entailed [verifuse-shapes:reasoning]
(define-fun assume_0 () Bool (>= x_size0 1))
(assert assume_0)
; assumption positive size (arg3_1.size(2), arg3_1.size(3), convolution_3): entailed [verifuse-shapes:reasoning]
(define-fun assume_1 () Bool (>= x_size2 1))
(assert assume_1)
; assumption convolution window fits (convolution, convolution_1, convolution_2, convolution_4): entailed [verifuse-shapes:reasoning]
(define-fun assume_2 () Bool (>= (+ 2 x_size2) 3))
(assert assume_2)
; assumption convolution window fits (convolution_5, convolution_7): entailed [verifuse-shapes:reasoning]
(define-fun assume_3 () Bool (>= (+ 3 (div (+ (- 1) x_size2) 2)) 3))
(assert assume_3)
; assumption convolution window fits (convolution_6): entailed [verifuse-shapes:reasoning]
(define-fun assume_4 () Bool (>= (+ 1 (div (+ (- 1) x_size2) 2)) 1))
(assert assume_4)
; assumption convolution window fits (convolution_8, convolution_10): entailed [verifuse-shapes:reasoning]
(define-fun assume_5 () Bool (>= (+ 3 (div (+ (- 1) x_size2) 4)) 3))
(assert assume_5)
; assumption convolution window fits (convolution_9): entailed [verifuse-shapes:reasoning]
(define-fun assume_6 () Bool (>= (+ 1 (div (+ (- 1) x_size2) 4)) 1))
(assert assume_6)
; assumption convolution window fits (convolution_11): entailed [verifuse-shapes:reasoning]
(define-fun assume_7 () Bool (>= (+ 3 (div (+ (- 1) x_size2) 8)) 3))
(assert assume_7)
; assumption view keeps element count (view): entailed [structural]
(define-fun assume_8 () Bool (= (* 64 x_size0) (* 64 x_size0)))
(assert assume_8)
(define-fun output0_size0 () Int x_size0)
(define-fun output0_size1 () Int 10)
(check-sat)
(get-value (x_size0 x_size1 x_size2))

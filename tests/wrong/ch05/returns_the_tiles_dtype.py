# expect: wrong_dtype from check_online_softmax(online_softmax)
patch("scores, values = scores.float()", "dtype, scores, values = scores.dtype, scores.float()")
patch("return acc / total, m + torch.log(total)", "return (acc / total).to(dtype), m + total.log()")

# expect: missing_rescale from check_online_softmax(online_softmax)
patch("acc = acc * rescale + weights @ values", "acc = acc + weights @ values")

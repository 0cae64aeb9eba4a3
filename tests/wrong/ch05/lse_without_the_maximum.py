# expect: wrong_result from check_online_softmax(online_softmax)
patch("return acc / total, m + torch.log(total)", "return acc / total, torch.log(total)")

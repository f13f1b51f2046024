use proptest::prelude::*;

use super::*;
use crate::money::Usd;

fn banner(id: &str, sizes: &[Size]) -> Creative {
    Creative {
        id: id.into(),
        format: Format::Banner,
        sizes: sizes.to_vec(),
        adomain: vec!["shoes.example".into()],
        cat: vec!["IAB18-3".into()],
        cattax: DEFAULT_CATTAX,
        attr: vec![3],
        bundle: Some("com.example.shoes".into()),
        adm: format!("<a href=\"https://shoes.example/\"><img src=\"{id}.png\"></a>"),
    }
}

fn ads(creatives: Vec<Creative>) -> Ads {
    Ads {
        creatives,
        seat: Some("seat-7".into()),
        deals: Vec::new(),
    }
}

const MEDIUM_RECTANGLE: &[Size] = &[(300, 250)];

/// An open-auction banner impression of 300x250 with no restrictions and a floor of 1.
fn open() -> Placement<'static, Usd> {
    Placement {
        banner: Some(Slot {
            sizes: MEDIUM_RECTANGLE,
            battr: &[],
        }),
        video: None,
        native: None,
        floor: Cpm::from_units(1),
        bcat: &[],
        cattax: DEFAULT_CATTAX,
        badv: &[],
        bapp: &[],
        wseat: &[],
        bseat: &[],
        private_auction: false,
        deals: &[],
    }
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

#[test]
fn a_banner_fits_a_slot_of_one_of_its_sizes_at_that_size() {
    let a = ads(vec![
        banner("leaderboard", &[(728, 90)]),
        banner("rectangle", &[(320, 50), (300, 250)]),
    ]);
    let fit = fit(&a, Cpm::from_units(2), &open()).unwrap();
    assert_eq!(
        (fit.creative.id.as_str(), fit.size, fit.deal),
        ("rectangle", Some((300, 250)), None)
    );
    assert_eq!(fit.floor, Cpm::from_units(1));
    // A slot that names no size takes any banner, at the creative's first size.
    let any_size = Placement {
        banner: Some(Slot::default()),
        ..open()
    };
    let fit = super::fit(&a, Cpm::from_units(2), &any_size).unwrap();
    assert_eq!(
        (fit.creative.id.as_str(), fit.size),
        ("leaderboard", Some((728, 90)))
    );
    // A video-only impression takes no banner.
    let video_only = Placement {
        banner: None,
        video: Some(Slot::default()),
        ..open()
    };
    assert_eq!(
        super::fit(&a, Cpm::from_units(2), &video_only),
        Err(Filtered::NoFittingCreative)
    );
    let mut spot = banner("spot", &[]);
    spot.format = Format::Video;
    let with_video = ads(vec![banner("rectangle", &[(300, 250)]), spot]);
    assert_eq!(
        super::fit(&with_video, Cpm::from_units(2), &video_only)
            .unwrap()
            .creative
            .id,
        "spot"
    );
}

#[test]
fn each_block_of_the_request_filters_and_names_itself() {
    let a = ads(vec![banner("rectangle", &[(300, 250)])]);
    let price = Cpm::from_units(2);
    let battr = [1, 3];
    let attr_blocked = Placement {
        banner: Some(Slot {
            sizes: MEDIUM_RECTANGLE,
            battr: &battr,
        }),
        ..open()
    };
    assert_eq!(
        fit(&a, price, &attr_blocked),
        Err(Filtered::BlockedAttribute)
    );
    for (bcat, blocked) in [
        (&["IAB18"][..], true),
        (&["IAB18-3"][..], true),
        (&["IAB18-30"][..], false),
        (&["IAB1"][..], false),
    ] {
        let bcat = strings(bcat);
        let placement = Placement {
            bcat: &bcat,
            ..open()
        };
        assert_eq!(
            fit(&a, price, &placement).err(),
            blocked.then_some(Filtered::BlockedCategory),
            "{bcat:?}"
        );
    }
    // Another taxonomy: the categories cannot be compared, so a non-empty bcat blocks.
    let bcat = strings(&["IAB1"]);
    let other_taxonomy = Placement {
        bcat: &bcat,
        cattax: 2,
        ..open()
    };
    assert_eq!(
        fit(&a, price, &other_taxonomy),
        Err(Filtered::BlockedCategory)
    );
    for (badv, blocked) in [
        (&["shoes.example"][..], true),
        (&["SHOES.example"][..], true),
        (&["example"][..], true),
        (&["hoes.example"][..], false),
        (&["boots.example"][..], false),
    ] {
        let badv = strings(badv);
        let placement = Placement {
            badv: &badv,
            ..open()
        };
        assert_eq!(
            fit(&a, price, &placement).err(),
            blocked.then_some(Filtered::BlockedAdvertiser),
            "{badv:?}"
        );
    }
    let bapp = strings(&["com.example.shoes"]);
    let app_blocked = Placement {
        bapp: &bapp,
        ..open()
    };
    assert_eq!(fit(&a, price, &app_blocked), Err(Filtered::BlockedApp));
}

#[test]
fn seats_are_allowed_or_blocked_by_id() {
    let a = ads(vec![banner("rectangle", &[(300, 250)])]);
    let price = Cpm::from_units(2);
    let (ours, others) = (strings(&["seat-1", "seat-7"]), strings(&["seat-1"]));
    for (wseat, bseat, allowed) in [
        (&ours, &Vec::new(), true),
        (&others, &Vec::new(), false),
        (&Vec::new(), &ours, false),
        (&Vec::new(), &others, true),
    ] {
        let placement = Placement {
            wseat,
            bseat,
            ..open()
        };
        assert_eq!(
            fit(&a, price, &placement).is_ok(),
            allowed,
            "{wseat:?} {bseat:?}"
        );
    }
    // A campaign with no seat cannot be among the seats a wseat lists.
    let seatless = Ads {
        seat: None,
        ..a.clone()
    };
    let placement = Placement {
        wseat: &others,
        ..open()
    };
    assert_eq!(
        fit(&seatless, price, &placement),
        Err(Filtered::SeatNotAllowed)
    );
}

#[test]
fn deals_are_the_only_door_of_a_deal_campaign_and_of_a_private_auction() {
    let open_campaign = ads(vec![banner("rectangle", &[(300, 250)])]);
    let deal_campaign = Ads {
        deals: strings(&["deal-a", "deal-b"]),
        ..open_campaign.clone()
    };
    let allowed_seats = strings(&["seat-9"]);
    let other_domains = strings(&["boots.example"]);
    let deals = [
        Deal {
            id: "deal-x",
            floor: Cpm::from_units(1),
            wseat: &[],
            wadomain: &[],
            fixed_price: false,
        },
        Deal {
            id: "deal-a",
            floor: Cpm::from_units(5),
            wseat: &[],
            wadomain: &[],
            fixed_price: false,
        },
        Deal {
            id: "deal-b",
            floor: Cpm::from_units(3),
            wseat: &[],
            wadomain: &[],
            fixed_price: false,
        },
    ];
    let with_deals = Placement {
        deals: &deals,
        ..open()
    };
    // The open-auction campaign ignores the deals; the deal campaign takes the first it targets whose
    // floor its price meets, with that deal's floor.
    let price = Cpm::from_units(4);
    assert_eq!(fit(&open_campaign, price, &with_deals).unwrap().deal, None);
    let fit_b = fit(&deal_campaign, price, &with_deals).unwrap();
    assert_eq!(
        (fit_b.deal, fit_b.floor),
        (Some("deal-b"), Cpm::from_units(3))
    );
    assert_eq!(fit_b.max_bid, price);
    // A fixed-price deal: the bid offers its floor, the agreed price.
    let fixed = [Deal {
        fixed_price: true,
        ..deals[2]
    }];
    let placement = Placement {
        deals: &fixed,
        ..open()
    };
    let fixed_fit = fit(&deal_campaign, price, &placement).unwrap();
    assert_eq!(fixed_fit.max_bid, Cpm::from_units(3));
    assert_eq!(
        fit(&deal_campaign, Cpm::from_units(2), &with_deals),
        Err(Filtered::BelowDealFloor)
    );
    assert_eq!(fit(&deal_campaign, price, &open()), Err(Filtered::NoDeal));
    let private = Placement {
        private_auction: true,
        ..with_deals
    };
    assert_eq!(fit(&open_campaign, price, &private), Err(Filtered::NoDeal));
    assert_eq!(
        fit(&deal_campaign, price, &private).unwrap().deal,
        Some("deal-b")
    );
    // A deal's own seats and advertiser domains.
    let seat_limited = [Deal {
        wseat: &allowed_seats,
        ..deals[2]
    }];
    let placement = Placement {
        deals: &seat_limited,
        ..open()
    };
    assert_eq!(
        fit(&deal_campaign, price, &placement),
        Err(Filtered::SeatNotAllowed)
    );
    let domain_limited = [Deal {
        wadomain: &other_domains,
        ..deals[2]
    }];
    let placement = Placement {
        deals: &domain_limited,
        ..open()
    };
    assert_eq!(
        fit(&deal_campaign, price, &placement),
        Err(Filtered::BlockedAdvertiser)
    );
}

#[test]
fn the_furthest_reason_is_reported() {
    let a = ads(vec![
        banner("leaderboard", &[(728, 90)]),
        banner("rectangle", &[(300, 250)]),
    ]);
    let badv = strings(&["shoes.example"]);
    let placement = Placement {
        badv: &badv,
        ..open()
    };
    // One creative does not fit the size, the other fits but its advertiser is blocked.
    assert_eq!(
        fit(&a, Cpm::from_units(2), &placement),
        Err(Filtered::BlockedAdvertiser)
    );
    assert_eq!(
        fit(&Ads::default(), Cpm::from_units(2), &open()),
        Err(Filtered::NoCreative)
    );
    // In the open auction a creative that fits is still under the floor (1) at 0.5, or at nothing.
    for price in [Cpm::from_micros(500_000), Cpm::ZERO] {
        assert_eq!(fit(&a, price, &open()), Err(Filtered::BelowFloor));
    }
}

proptest! {
    /// Whatever the restrictions, a fit never breaks one: its creative is of a format the impression
    /// offers at a size it takes, none of its categories, domains, app or attributes is blocked, the
    /// seat is allowed, the price meets the door's floor, and a private auction gets deal bids only.
    #[test]
    fn a_fit_honours_every_restriction(
        sizes in proptest::collection::vec((1u32..4, 1u32..4), 0..3),
        creative_sizes in proptest::collection::vec((1u32..4, 1u32..4), 1..3),
        battr in proptest::collection::vec(1u32..6, 0..3),
        attr in proptest::collection::vec(1u32..6, 0..3),
        bcat in proptest::collection::vec(0usize..4, 0..2),
        cat in proptest::collection::vec(0usize..4, 0..2),
        badv in proptest::collection::vec(0usize..3, 0..2),
        adomain in proptest::collection::vec(0usize..3, 1..3),
        private_auction in any::<bool>(),
        deal_floor in 0u64..5,
        campaign_deal in any::<bool>(),
        price in 0u64..5,
    ) {
        const CATEGORIES: [&str; 4] = ["IAB1", "IAB1-1", "IAB2", "IAB2-7"];
        const DOMAINS: [&str; 3] = ["a.example", "b.example", "example"];
        let creative = Creative {
            id: "c".into(),
            format: Format::Banner,
            sizes: creative_sizes,
            adomain: adomain.iter().map(|&i| DOMAINS[i].to_string()).collect(),
            cat: cat.iter().map(|&i| CATEGORIES[i].to_string()).collect(),
            cattax: DEFAULT_CATTAX,
            attr,
            bundle: None,
            adm: "<div>ad</div>".into(),
        };
        let a = Ads {
            creatives: vec![creative],
            seat: None,
            deals: if campaign_deal { strings(&["d"]) } else { Vec::new() },
        };
        let bcat: Vec<String> = bcat.iter().map(|&i| CATEGORIES[i].to_string()).collect();
        let badv: Vec<String> = badv.iter().map(|&i| DOMAINS[i].to_string()).collect();
        let deals = [Deal { id: "d", floor: Cpm::<Usd>::from_units(deal_floor), wseat: &[], wadomain: &[], fixed_price: false }];
        let placement = Placement {
            banner: Some(Slot { sizes: &sizes, battr: &battr }),
            bcat: &bcat,
            badv: &badv,
            private_auction,
            deals: &deals,
            ..open()
        };
        if let Ok(fit) = fit(&a, Cpm::from_units(price), &placement) {
            let c = fit.creative;
            prop_assert!(sizes.is_empty() || fit.size.is_some_and(|s| sizes.contains(&s) && c.sizes.contains(&s)));
            prop_assert!(!c.attr.iter().any(|x| battr.contains(x)));
            let under = |x: &String, b: &String| x == b || x.starts_with(&(b.clone() + "-"));
            let within = |d: &String, b: &String| d == b || d.ends_with(&(".".to_string() + b));
            prop_assert!(!c.cat.iter().any(|x| bcat.iter().any(|b| under(x, b))));
            prop_assert!(!c.adomain.iter().any(|d| badv.iter().any(|b| within(d, b))));
            prop_assert_eq!(fit.deal.is_some(), campaign_deal);
            prop_assert!(!private_auction || fit.deal.is_some());
            if fit.deal.is_none() {
                prop_assert!(price >= 1, "the open floor is 1");
            }
            if fit.deal.is_some() {
                prop_assert!(Cpm::<Usd>::from_units(price) >= Cpm::from_units(deal_floor));
            }
        }
    }
}
